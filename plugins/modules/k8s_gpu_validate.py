#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: k8s_gpu_validate
short_description: Run a validation pod on every GPU node of a Kubernetes cluster and report pass or fail per node
version_added: 1.0.0
description:
  - Runs one pod per node from O(pod_template), each pinned to its node, waits until they have finished, reads the
    log of each pod that Succeeded and deletes the pods again, all in one module run.
  - A node passes when its pod Succeeded and its log contains O(expected_log). Otherwise the result names the reason,
    for example the scheduler's message when no node can take the pod (no free C(nvidia.com/gpu), a taint the pod
    does not tolerate, a cordoned node).
  - "Steps: select the nodes (O(nodes), else the nodes matching O(node_selector)); read the namespace and create it
    when missing; delete the pods of these nodes with the template's labels left from an earlier run (not those of other nodes,
    which a concurrent run may be using) and wait until they are gone;
    create one pod per node named C(gpu-validation-<node>); poll one pod listing by label until every pod has
    finished (see O(timeout) and O(unschedulable_timeout)); read the logs of the pods that Succeeded; delete the pods
    and wait until they are gone."
  - The pods are always deleted, also when a step fails. They come and go within the run, so they are not reported
    as a change; only creating the namespace is, and writing or removing a record (O(record)).
  - With O(record), each node that passed carries a record of it afterwards (annotation
    C(kubegpu.nvidia/gpu-validation)) holding the time and a digest of what the pod's success depended on, that is the
    node's boot ID, kernel, kubelet and container runtime versions (C(status.nodeInfo)), its C(nvidia.com/) labels
    and allocatable resources, and O(revision). A later play that lists the node and finds the same digest knows
    the proof still holds without running the pod again (the C(kubegpu.nvidia.gpu_validation_recorded) filter and
    the role C(kubegpu.nvidia.gpu_validation) do that).
  - Answers 429 (honouring C(Retry-After)) and 5xx, and dropped connections, are retried with backoff, a request
    that gets no answer within O(request_timeout) at once, O(retries) times per request; each step of the run
    gets at most O(timeout) seconds for its requests and their retries (see O(timeout)).
author:
  - kubegpu.nvidia maintainers (@kubegpu)
extends_documentation_fragment:
  - kubegpu.nvidia.k8s_auth
  - kubegpu.nvidia.k8s_auth.retries
attributes:
  check_mode:
    support: full
    description: Selects the nodes and reads the namespace; reports whether the namespace would be created; runs no pod.
  diff_mode:
    support: full
    description: Shows the namespace before and after.
  idempotent:
    support: full
    description: A second run validates again (new pods) and reports no change.
options:
  nodes:
    description:
      - Names of the Kubernetes nodes to validate.
      - Empty selects the nodes matching O(node_selector).
    type: list
    elements: str
    default: []
  node_selector:
    description:
      - Label selector of the nodes to validate when O(nodes) is empty.
      - The module fails when it selects no node.
    type: str
    default: nvidia.com/gpu.present=true
  namespace:
    description: Namespace the pods run in.
    type: str
    default: gpu-validation
  create_namespace:
    description:
      - Create O(namespace) when it does not exist, with the labels of O(pod_template).
      - With V(false), a missing namespace is an error.
    type: bool
    default: true
  pod_template:
    description:
      - The validation pod as a Pod manifest, without a name and without the node.
      - For each node the module names it C(gpu-validation-<node>), puts it in O(namespace) and adds a required
        node affinity C(matchFields) C(metadata.name In [<node>]), so the scheduler places it on that node (added to
        each node selector term the template already has).
      - C(metadata.labels) must not be empty; the module finds its pods by them (and deletes any pod carrying them
        in O(namespace) before it starts).
      - Give the container C(terminationMessagePolicy=FallbackToLogsOnError) so that a failed pod's reason holds the
        tail of its log.
      - With several containers, the log of the first one is checked.
    type: dict
    required: true
  resources:
    description:
      - "Per node name, the extended resource its pod asks for instead of the C(nvidia.com/) resources of the first
        container of O(pod_template) (limits and requests, same count), e.g. C({gpu01: nvidia.com/mig-1g.5gb}) for a
        node whose GPUs are all MIG devices under the device plugin's C(mixed) strategy."
      - Nodes not named keep the template's resources.
    type: dict
    default: {}
  expected_log:
    description: Text the log of a passing pod contains.
    type: str
    default: Test PASSED
  timeout:
    description:
      - Seconds to wait for the pods to finish, counted from their creation.
      - Also bounds the wait for deleted pods to be gone, and the API requests of each step of the run (selecting
        the nodes, the namespace and leftover pods; creating and waiting for the pods; reading their logs;
        deleting them; the records), retries included. No request waits longer and no retry starts later, so a
        server that never answers fails the module after O(timeout) seconds (C(error_kind=timeout)), also
        when O(request_timeout) is longer (with pods made before, their deletion gets O(timeout) seconds more).
    type: int
    default: 300
  unschedulable_timeout:
    description:
      - Seconds after the pods' creation after which the module stops waiting when every pod that has not finished
        is one the scheduler reports Unschedulable.
    type: int
    default: 20
  poll_interval:
    description:
      - Longest pause between two polls of the pods, in seconds.
      - The first polls come sooner (0.2 s, doubling up to this), so pods that finish at once cost one listing.
    type: float
    default: 2
  fail_on_failure:
    description:
      - Fail when a node does not pass, naming each failed node and its reason.
      - With V(false), the result reports the nodes that failed (RV(passed), RV(results)) and the module succeeds.
    type: bool
    default: true
  record:
    description:
      - Record the result on each node after the pods ran, in its annotation C(kubegpu.nvidia/gpu-validation).
        A node that passed gets the digest of its state (as listed before the pods ran, with O(revision)) and the
        time, unless it holds that digest already (then its record, and its time, stay as they are); a node that
        failed loses its record.
      - Needs the right to patch nodes. A failed write fails the module, naming the node and the validation's outcome.
    type: bool
    default: false
  revision:
    description:
      - Anything else the proof depends on, folded into the digest O(record) writes, for example the pod
        template and the device plugin's DaemonSet revision. A record made with another revision does not hold.
    type: str
    default: ""
requirements:
  - kubernetes >= 24.2.0 (Python library)
notes:
  - "Requests per run: one node listing (none with O(nodes)), one namespace read (and a create when missing), one
    pod listing for leftovers, one create per node, the polls (one pod listing each), one log read per pod that
    Succeeded, one delete per node and one listing (or more) until the pods are gone; with O(record), one node
    listing and a patch per node whose record changes."
  - The role C(kubegpu.nvidia.gpu_validation) runs this module with the CUDA vector-add sample as the pod.
seealso:
  - module: kubegpu.nvidia.k8s_gpu_label
"""

EXAMPLES = r"""
- name: Run the CUDA vector-add sample on every node labelled nvidia.com/gpu.present=true
  kubegpu.nvidia.k8s_gpu_validate:
    kubeconfig: /etc/kubernetes/admin.conf
    pod_template:
      apiVersion: v1
      kind: Pod
      metadata:
        labels:
          app.kubernetes.io/name: gpu-validation
      spec:
        restartPolicy: Never
        runtimeClassName: nvidia
        tolerations:
          - key: nvidia.com/gpu
            operator: Exists
            effect: NoSchedule
        containers:
          - name: cuda-vectoradd
            image: nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0
            terminationMessagePolicy: FallbackToLogsOnError
            resources:
              limits:
                nvidia.com/gpu: 1
  delegate_to: localhost
  run_once: true

- name: Validate two named nodes and only report the outcome
  kubegpu.nvidia.k8s_gpu_validate:
    nodes: [gpu-node-1, gpu-node-2]
    pod_template: "{{ lookup('ansible.builtin.template', 'pod.yaml.j2') | from_yaml }}"
    fail_on_failure: false
    timeout: 120
  register: validation

- name: Validate the GPU nodes and record each pass on the node
  kubegpu.nvidia.k8s_gpu_validate:
    nodes: [gpu-node-1, gpu-node-2]
    pod_template: "{{ lookup('ansible.builtin.template', 'pod.yaml.j2') | from_yaml }}"
    record: true
    revision: "{{ lookup('ansible.builtin.template', 'pod.yaml.j2') | hash('sha256') }}"

- name: Show the nodes that failed
  ansible.builtin.debug:
    msg: "{{ validation.results | rejectattr('passed') | map(attribute='node') | list }}"
"""

RETURN = r"""
changed:
  description: Whether the namespace was (or, in check mode, would be) created, or a record written or removed.
  returned: always
  type: bool
nodes:
  description: The names of the nodes validated (or, in check mode, that would be), in order.
  returned: when the nodes were selected
  type: list
  elements: str
  sample: ["gpu-node-1", "gpu-node-2"]
results:
  description: One entry per node, in the order of RV(nodes); empty in check mode.
  returned: success, and when a node failed
  type: list
  elements: dict
  contains:
    node:
      description: Node name.
      type: str
      sample: gpu-node-1
    pod:
      description: Name of the node's validation pod.
      type: str
      sample: gpu-validation-gpu-node-1
    passed:
      description: Whether the pod Succeeded and its log contains O(expected_log).
      type: bool
    phase:
      description: The pod's last phase; C(Missing) when it was gone.
      type: str
      sample: Succeeded
    reason:
      description:
        - O(expected_log) for a node that passed.
        - "Else why it did not: C(<Reason>: <message>) of a pod the scheduler did not place (for example
          C(Unschedulable: 0/3 nodes are available: 1 Insufficient nvidia.com/gpu.)),
          C(log lacks \"<expected_log>\": <log>) of a pod that Succeeded without the text,
          C(<reason>: <message>) of a pod that Failed (the message of a failed container is its log tail),
          C(<reason>: <message>) of a waiting container (for example C(ErrImagePull)),
          else C(still <phase> after <timeout>s) (phase C(Missing) when the pod was gone)."
      type: str
      sample: Test PASSED
    recorded:
      description: Whether the node carries a record of its pass after the run (O(record)).
      type: bool
      returned: with O(record)
passed:
  description: Whether every node passed.
  returned: when the pods ran (not in check mode)
  type: bool
msg:
  description: C(GPU validation passed on N node(s)), or which nodes failed and why.
  returned: always
  type: str
  sample: "GPU validation failed on 1 of 2 node(s): cpu-node: Unschedulable: 0/3 nodes are available: ..."
error_kind:
  description:
    - On failure, what failed, for a play that handles the failure itself.
    - V(runtime) some nodes did not pass (with O(fail_on_failure); RV(results) has every node's outcome);
      V(not_found) no node matches O(node_selector), or the namespace is missing and may not be created;
      V(api) the API server could not be reached or refused a request; V(timeout) the API server did not answer
      within O(request_timeout) or O(timeout), or pods were still there O(timeout) seconds after their deletion;
      V(input) an option, pod template or kubeconfig the module cannot use (nothing was sent);
      V(dependency) the C(kubernetes) library is missing; V(bug) a defect of the collection.
  returned: failure (except Ansible's own argument errors)
  type: str
  sample: timeout
api_requests:
  description: API requests made, counted by verb (C(list), C(get), C(create), C(delete), C(patch)), retries included.
  returned: always
  type: dict
  sample: {"get": 3, "list": 3, "create": 2, "delete": 2}
diff:
  description: The namespace before and after (with C(--diff)).
  returned: when diff mode is on and the namespace was read
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError, run_module
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_validation import (
    Validation, ValidationFailed, failure_message, success_message)
from ansible_collections.kubegpu.nvidia.plugins.module_utils.k8s_client import (
    AUTH_ARG_SPEC, HAS_KUBERNETES, K8S_IMPORT_ERROR, get_api_client)
from ansible_collections.kubegpu.nvidia.plugins.module_utils.k8s_pods import PodAPI


def check_options(params):
    """A one-line message for an option out of range, or None."""
    for name in ("timeout", "unschedulable_timeout", "retries"):
        if params[name] < 0:
            return "%s must not be negative" % name
    if params["poll_interval"] <= 0:
        return "poll_interval must be greater than 0"
    return None


def main():
    argument_spec = dict(AUTH_ARG_SPEC)
    argument_spec.update(
        nodes=dict(type="list", elements="str", default=[]),
        node_selector=dict(type="str", default="nvidia.com/gpu.present=true"),
        namespace=dict(type="str", default="gpu-validation"),
        create_namespace=dict(type="bool", default=True),
        pod_template=dict(type="dict", required=True),
        expected_log=dict(type="str", default="Test PASSED"),
        timeout=dict(type="int", default=300),
        unschedulable_timeout=dict(type="int", default=20),
        poll_interval=dict(type="float", default=2.0),
        fail_on_failure=dict(type="bool", default=True),
        retries=dict(type="int", default=5),
        record=dict(type="bool", default=False),
        revision=dict(type="str", default=""),
        resources=dict(type="dict", default={}),
    )
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    if not HAS_KUBERNETES:
        module.fail_json(msg=missing_required_lib("kubernetes"), error_kind="dependency", exception=K8S_IMPORT_ERROR)
    state = {"api": None, "run": None}

    def progress():
        """What the run did so far: whether it changed anything, its requests, its nodes and diff."""
        api, run = state["api"], state["run"]
        result = dict(changed=run.changed if run else False, api_requests=api.counts if api else {})
        if run is not None and run.node_names:
            result["nodes"] = run.node_names
        if run is not None and module._diff and run.diff is not None:
            result["diff"] = run.diff
        return result

    def work(module):
        params = module.params
        error = check_options(params)
        if error:
            raise InputError(error)
        api = state["api"] = PodAPI(get_api_client(params), retries=params["retries"],
                                    request_timeout=params["request_timeout"])
        run = state["run"] = Validation(
            api, params["pod_template"], namespace=params["namespace"], nodes=params["nodes"],
            node_selector=params["node_selector"], create_namespace=params["create_namespace"],
            expected_log=params["expected_log"], timeout=params["timeout"],
            unschedulable_timeout=params["unschedulable_timeout"], poll_interval=params["poll_interval"],
            record=params["record"], revision=params["revision"], resources=params["resources"])
        results = run.run(check_mode=module.check_mode)
        result = progress()
        if module.check_mode:
            result.update(msg="check mode: no pod run; the namespace %s %s" % (
                params["namespace"], "would be created" if run.changed else "exists"), results=[])
            return result
        failed = failure_message(results)
        result.update(results=results, passed=not failed, msg=failed or success_message(results))
        if failed and params["fail_on_failure"]:
            # the nodes failed, not the run: the result carries every node's outcome
            raise ValidationFailed(failed, **dict((k, v) for k, v in result.items() if k != "msg"))
        return result

    run_module(module, work, progress)


if __name__ == "__main__":
    main()
