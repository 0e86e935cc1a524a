"""A throwaway CA, a serving certificate for 127.0.0.1 and client certificates, made once per process.

A client certificate authenticates its holder as kube-apiserver's x509 authenticator does: the subject's
common name is the user, its organizations are the groups.
"""

import datetime
import functools
import ipaddress
import os
import tempfile

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _name(cn):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _validity():
    now = datetime.datetime.now(datetime.timezone.utc)
    return now - datetime.timedelta(hours=1), now + datetime.timedelta(days=30)


def _key_usage(cert_sign):
    return x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                         data_encipherment=False, key_agreement=False, key_cert_sign=cert_sign, crl_sign=cert_sign,
                         encipher_only=False, decipher_only=False)


SERVER_CA = "kubeapi-test-ca"


def _authority(cn):
    """(certificate, private key) of a self-signed CA named ``cn``, one per name and process."""
    return _make_authority(cn)


@functools.lru_cache(maxsize=None)
def _make_authority(cn):
    """(certificate, private key) of a self-signed CA named ``cn``."""
    start, end = _validity()
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(cn)
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(start).not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(_key_usage(True), critical=True)
          .add_extension(ca_ski, critical=False)
          .sign(ca_key, hashes.SHA256()))
    return ca, ca_key


@functools.lru_cache(maxsize=1)
def certificates():
    """(ca_pem, cert_pem, key_pem) as bytes."""
    start, end = _validity()
    ca, ca_key = _authority(SERVER_CA)
    ca_name = ca.subject
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(_name("kube-apiserver")).issuer_name(ca_name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.DNSName("kubernetes"),
                x509.DNSName("kubernetes.default.svc"),
                x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    return (ca.public_bytes(pem), cert.public_bytes(pem),
            key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))


@functools.lru_cache(maxsize=1)
def _directory():
    return tempfile.mkdtemp(prefix="kubeapi-tls-")


def _write(name, data):
    path = os.path.join(_directory(), name)
    with open(path, "wb") as handle:
        handle.write(data)
    os.chmod(path, 0o600)
    return path


@functools.lru_cache(maxsize=1)
def certificate_files():
    """(ca_path, cert_path, key_path) in a private directory of this process."""
    ca, cert, key = certificates()
    return tuple(_write(name, data) for name, data in (("ca.crt", ca), ("tls.crt", cert), ("tls.key", key)))


@functools.lru_cache(maxsize=None)
def client_certificate_files(user, groups=(), authority=SERVER_CA):
    """(cert_path, key_path) of a client certificate for ``user`` in ``groups``.

    Signed by the test CA (the server trusts it), or by another CA named ``authority`` (it does not).
    """
    start, end = _validity()
    ca, ca_key = _authority(authority)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, group) for group in groups]
                        + [x509.NameAttribute(NameOID.COMMON_NAME, user)])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    stem = "client-%s-%s" % (authority, "-".join((user,) + tuple(groups)).replace(":", "_").replace("/", "_"))
    return (_write(stem + ".crt", cert.public_bytes(pem)),
            _write(stem + ".key", key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                    serialization.NoEncryption())))
