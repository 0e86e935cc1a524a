/*
 * fakenvml: a stand-in for NVIDIA's libnvidia-ml.so.1 that the real pynvml
 * loads unchanged. It reports the GPUs described by a small text file instead
 * of asking a kernel driver, so GPU discovery can be exercised on machines
 * without GPUs.
 *
 * Configuration: the file named by $FAKENVML_CONFIG, else /etc/fakenvml/gpus.conf.
 *
 *   driver_version = 535.183.01
 *   cuda_driver_version = 12020
 *   fault = none          # none | driver_not_loaded | no_permission | unknown | hang
 *   not_supported = nvmlDeviceGetMigMode, nvmlDeviceGetMaxMigDeviceCount
 *   [gpu]                 # one section per GPU, in index order
 *   name = NVIDIA H100 80GB HBM3
 *   uuid = GPU-4a1b2c3d-0000-4000-8000-000000000000
 *   memory_total_mib = 81559
 *   pci_bus_id = 00000000:18:00.0
 *   pci_device_id = 0x233010DE
 *   pci_class = 0x030200  # not an NVML value: the class the fake sysfs views give the GPU
 *   compute_capability = 9.0
 *   mig_mode = 0          # omit every mig_* key: MIG calls return NOT_SUPPORTED
 *   mig_pending = 0
 *   max_mig_devices = 7
 *   mig_devices = 3g.40gb, 2g.20gb, 1g.10gb+me, 1c.2g.20gb
 *   mig_multiprocessors_per_slice = 16
 *   not_supported = nvmlDeviceGetPcieReplayCounter   # this GPU only (also accepted globally, above)
 *
 * Health signals, per [gpu] section, healthy by default:
 *
 *   gpu_state = ok                  # ok | lost (NVML_ERROR_GPU_IS_LOST from nvmlDeviceGetHandleByIndex and
 *                                   #   every query) | reset_required (NVML_ERROR_RESET_REQUIRED from the
 *                                   #   health queries; name, UUID and PCI info still answer)
 *   ecc_volatile_uncorrected = 0    # nvmlDeviceGetTotalEccErrors, per error type and counter type
 *   ecc_aggregate_uncorrected = 0
 *   ecc_volatile_corrected = 0
 *   ecc_aggregate_corrected = 0
 *   remapped_rows_corrected = 0     # nvmlDeviceGetRemappedRows (compute capability 8.0 and later, and not
 *   remapped_rows_uncorrected = 0   #   while MIG devices exist; NOT_SUPPORTED otherwise)
 *   remap_pending = 0               # 0 or 1
 *   remap_failure = 0               # 0 or 1
 *   retired_pages_sbe = 0           # nvmlDeviceGetRetiredPages[_v2] per cause (before compute capability
 *   retired_pages_dbe = 0           #   8.0; NOT_SUPPORTED from 8.0 on, where rows are remapped instead)
 *   retired_pages_pending = 0       # nvmlDeviceGetRetiredPagesPendingStatus, 0 or 1
 *   clocks_event_reasons = 0x0      # nvmlDeviceGetCurrentClocksEventReasons (and ...ThrottleReasons)
 *   pcie_link_gen = 5               # current; default the maximum
 *   pcie_link_gen_max = 5           # default 5 from compute capability 9.0, 4 for 8.x, 3 before
 *   pcie_link_width = 16            # current; default the maximum
 *   pcie_link_width_max = 16
 *   pcie_replay_counter = 0
 *   temperature = 40                # nvmlDeviceGetTemperature (GPU sensor), degrees C
 *   temperature_slowdown = 90       # nvmlDeviceGetTemperatureThreshold SLOWDOWN (SHUTDOWN is 5 more)
 *   fabric_state = completed        # not_started | in_progress | completed; omitted: nvmlDeviceGetGpuFabricInfo*
 *                                   #   answer NOT_SUPPORTED (no NVSwitch)
 *   fabric_health = healthy         # healthy | unhealthy | limited (healthSummary of the v3 struct)
 *   fabric_health_mask = 0x0        # healthMask of the v2 and v3 structs (NVML_GPU_FABRIC_HEALTH_MASK_*)
 *   recovery_action = none          # none | gpu_reset | node_reboot | drain_p2p | drain_and_reset |
 *                                   #   not_supported: field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (230) of
 *                                   #   nvmlDeviceGetFieldValues; any other field answers NOT_SUPPORTED
 *
 * name and driver_version may hold \xHH escapes (and \\ for a backslash), to give
 * strings that are not UTF-8, as a driver or a board with a corrupt name string does.
 *
 * MIG devices: profiles [<c>c.]<g>g.<gb>gb with an optional +me, +me.all, +gfx or -me.
 * nvmlDeviceGetAttributes_v2 (and the older nvmlDeviceGetAttributes) answer for MIG
 * device handles, as NVML does, with values derived from the profile:
 * gpuInstanceSliceCount g, computeInstanceSliceCount c (else g), multiprocessorCount
 * c x mig_multiprocessors_per_slice (default 14, the A100's), sharedCopyEngineCount g,
 * decoders/JPEG/OFA as the A100 has them per GPU instance size (1g: 0/0/0, 2g: 1/0/0,
 * 3g and 4g: 2/0/0, 7g: 5/1/1; +me adds one decoder, JPEG and OFA to a 1g instance,
 * +me.all gives it the 7g media engines, -me none), no encoders, memorySizeMB (the MIG
 * device's memory total) gb x 1024, except on a GPU with a MIG profile table (a model
 * of mig_models), where it is the GPU instance profile's memorySizeMB, as NVML reports
 * it. Full GPUs answer NVML_ERROR_NOT_SUPPORTED.
 *
 * No file: nvmlInit* returns NVML_ERROR_DRIVER_NOT_LOADED. A file that does
 * not parse: nvmlInit* returns NVML_ERROR_UNKNOWN and prints
 * "fakenvml: <path>:<line>: <reason>" to stderr. fault = hang: nvmlInit* never
 * returns (a wedged GPU or driver).
 *
 * Built with -DFAKENVML_LEGACY the library lacks the MIG, attributes and compute
 * capability functions, like a driver older than those calls. Built with
 * -DFAKENVML_NO_ATTRIBUTES_V2 it lacks nvmlDeviceGetAttributes_v2 only (drivers
 * before R470 have nvmlDeviceGetAttributes alone).
 */
#include <ctype.h>
#include <stddef.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef int nvmlReturn_t;
typedef struct fake_device *nvmlDevice_t;

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_ALREADY_INITIALIZED = 5,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_INSUFFICIENT_POWER = 8,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_IRQ_ISSUE = 11,
    NVML_ERROR_LIBRARY_NOT_FOUND = 12,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_CORRUPTED_INFOROM = 14,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_RESET_REQUIRED = 16,
    NVML_ERROR_OPERATING_SYSTEM = 17,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    NVML_ERROR_IN_USE = 19,
    NVML_ERROR_MEMORY = 20,
    NVML_ERROR_NO_DATA = 21,
    NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
};

#define NVML_MEMORY_V2_VERSION 0x02000028u
#define MIB 1048576ULL

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

typedef struct {
    unsigned int multiprocessorCount;
    unsigned int sharedCopyEngineCount;
    unsigned int sharedDecoderCount;
    unsigned int sharedEncoderCount;
    unsigned int sharedJpegCount;
    unsigned int sharedOfaCount;
    unsigned int gpuInstanceSliceCount;
    unsigned int computeInstanceSliceCount;
    unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef union {
    double dVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    long long sllVal;
    int siVal;
    unsigned short usVal;
} nvmlValue_t;

typedef struct {
    unsigned int fieldId;
    unsigned int scopeId;
    long long timestamp;
    long long latencyUsec;
    int valueType;
    nvmlReturn_t nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;

#define NVML_VALUE_TYPE_UNSIGNED_INT 1
#define NVML_FI_DEV_GET_GPU_RECOVERY_ACTION 230
#define FABRIC_UUID_LEN 16

typedef struct {
    unsigned char clusterUuid[FABRIC_UUID_LEN];
    nvmlReturn_t status;
    unsigned int cliqueId;
    unsigned int state;
} nvmlGpuFabricInfo_t;

typedef struct {
    unsigned int version;
    unsigned char clusterUuid[FABRIC_UUID_LEN];
    nvmlReturn_t status;
    unsigned int cliqueId;
    unsigned int state;
    unsigned int healthMask;
    unsigned char healthSummary; /* v3 only */
} nvmlGpuFabricInfoV_t;

#define NVML_GPU_FABRIC_INFO_V2 0x02000024u /* sizeof the v2 struct (no healthSummary) | 2 << 24 */
#define NVML_GPU_FABRIC_INFO_V3 0x03000028u

enum gpu_state { STATE_OK, STATE_LOST, STATE_RESET_REQUIRED };

/* Numeric health keys of a [gpu] section: name, field, largest value, default. */
enum health_value {
    H_ECC_VOL_UNC, H_ECC_AGG_UNC, H_ECC_VOL_COR, H_ECC_AGG_COR, H_REMAP_COR, H_REMAP_UNC, H_REMAP_PENDING,
    H_REMAP_FAILURE, H_RETIRED_SBE, H_RETIRED_DBE, H_RETIRED_PENDING, H_PCIE_GEN, H_PCIE_GEN_MAX, H_PCIE_WIDTH,
    H_PCIE_WIDTH_MAX, H_PCIE_REPLAYS, H_TEMPERATURE, H_TEMPERATURE_SLOWDOWN, H_VALUES
};
static const struct {
    const char *name;
    unsigned long long max;
    unsigned long long fallback;
} health_keys[H_VALUES] = {
    {"ecc_volatile_uncorrected", 1ULL << 40, 0},
    {"ecc_aggregate_uncorrected", 1ULL << 40, 0},
    {"ecc_volatile_corrected", 1ULL << 40, 0},
    {"ecc_aggregate_corrected", 1ULL << 40, 0},
    {"remapped_rows_corrected", 100000, 0},
    {"remapped_rows_uncorrected", 100000, 0},
    {"remap_pending", 1, 0},
    {"remap_failure", 1, 0},
    {"retired_pages_sbe", 1024, 0},
    {"retired_pages_dbe", 1024, 0},
    {"retired_pages_pending", 1, 0},
    {"pcie_link_gen", 6, 0},
    {"pcie_link_gen_max", 6, 0},
    {"pcie_link_width", 32, 0},
    {"pcie_link_width_max", 32, 16},
    {"pcie_replay_counter", 0xffffffffULL, 0},
    {"temperature", 200, 40},
    {"temperature_slowdown", 200, 90},
};

#define MAX_GPUS 64
#define MAX_MIG 7
#define NAME_LEN 96
#define DEVICE_MAGIC 0x464e564du /* "FNVM" */

struct fake_device {
    unsigned int magic;
    unsigned int index;
    struct fake_device *parent; /* set on MIG devices */
    int header_line;            /* line of the [gpu] header, for messages */
    unsigned long long seen;    /* bit per key, to refuse duplicates */
    char name[NAME_LEN];
    char uuid[NAME_LEN];
    unsigned long long memory_total_mib, memory_used_mib;
    unsigned int domain, bus, device, function;
    unsigned int pci_device_id, pci_subsystem_id;
    int cc_major, cc_minor, has_cc;
    unsigned int pci_class;
    unsigned int mig_current, mig_pending, max_mig;
    int has_mig;
    unsigned int mig_count;
    unsigned int mig_sm_per_slice;
    struct fake_device *mig[MAX_MIG];
    nvmlDeviceAttributes_t attributes; /* MIG devices only */
    char mig_profile[24];              /* MIG devices only: the profile they were made from */
    /* MIG management (a GPU of a model in mig_models; see the MIG state section) */
    int model;                         /* index in mig_models, -1: no profile table */
    unsigned int passthrough;          /* mig_passthrough: the reset stand-in refuses it */
    int fail_create_after;             /* mig_fail_create_after: -1, else GPU instance creations that succeed */
    unsigned int nproc;
    unsigned int pids[4];
    char pnames[4][32];
    /* health signals */
    enum gpu_state state;
    unsigned long long health[H_VALUES];
    unsigned long long clocks_event_reasons;
    int fabric_state;    /* -1: no fabric (NOT_SUPPORTED), else NVML_GPU_FABRIC_STATE_* */
    int fabric_health;   /* NVML_GPU_FABRIC_HEALTH_SUMMARY_* */
    unsigned int fabric_health_mask;
    int recovery_action; /* -1: field not supported, else NVML_GPU_RECOVERY_ACTION_* */
    unsigned char *not_supported; /* per-GPU not_supported list, indexed like known_functions */
};

enum fault { FAULT_NONE, FAULT_DRIVER_NOT_LOADED, FAULT_NO_PERMISSION, FAULT_UNKNOWN, FAULT_HANG };

/* Every function a configuration may name in not_supported. */
static const char *const known_functions[] = {
    "nvmlSystemGetDriverVersion",
    "nvmlSystemGetNVMLVersion",
    "nvmlSystemGetCudaDriverVersion",
    "nvmlSystemGetCudaDriverVersion_v2",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetCount_v2",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetHandleByUUID",
    "nvmlDeviceGetHandleByPciBusId",
    "nvmlDeviceGetHandleByPciBusId_v2",
    "nvmlDeviceGetIndex",
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetMemoryInfo_v2",
    "nvmlDeviceGetPciInfo",
    "nvmlDeviceGetPciInfo_v2",
    "nvmlDeviceGetPciInfo_v3",
    "nvmlDeviceGetMinorNumber",
    "nvmlDeviceGetCudaComputeCapability",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceIsMigDeviceHandle",
    "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
    "nvmlDeviceGetAttributes",
    "nvmlDeviceGetAttributes_v2",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetRetiredPages",
    "nvmlDeviceGetRetiredPages_v2",
    "nvmlDeviceGetRetiredPagesPendingStatus",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetCurrPcieLinkGeneration",
    "nvmlDeviceGetMaxPcieLinkGeneration",
    "nvmlDeviceGetCurrPcieLinkWidth",
    "nvmlDeviceGetMaxPcieLinkWidth",
    "nvmlDeviceGetPcieReplayCounter",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetTemperatureThreshold",
    "nvmlDeviceGetGpuFabricInfo",
    "nvmlDeviceGetGpuFabricInfoV",
    "nvmlDeviceGetFieldValues",
};
#define N_KNOWN (sizeof(known_functions) / sizeof(known_functions[0]))

static struct {
    int init_count;
    enum fault fault;
    char driver_version[80];
    char nvml_version[80];
    int cuda_driver_version;
    int has_driver_version, has_cuda_version, has_nvml_version;
    unsigned char not_supported[N_KNOWN];
    unsigned int gpu_count;
    struct fake_device gpus[MAX_GPUS];
    unsigned int mig_total;
    struct fake_device migs[MAX_GPUS * MAX_MIG];
    unsigned char gpu_not_supported[MAX_GPUS][N_KNOWN];
} st;

/* ------------------------------------------------------------------ */
/* Configuration parsing                                              */

struct parser {
    const char *path;
    int line;
    char msg[256];
};

static int fail(struct parser *p, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(struct parser *p, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->msg, sizeof(p->msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "fakenvml: %s:%d: %s\n", p->path, line, p->msg);
    return -1;
}

static char *trim(char *s)
{
    char *end;
    while (isspace((unsigned char)*s))
        s++;
    end = s + strlen(s);
    while (end > s && isspace((unsigned char)end[-1]))
        *--end = '\0';
    return s;
}

static int known_index(const char *name)
{
    size_t i;
    for (i = 0; i < N_KNOWN; i++)
        if (strcmp(known_functions[i], name) == 0)
            return (int)i;
    return -1;
}

static int unsupported(const char *function)
{
    int i = known_index(function);
    return i >= 0 && st.not_supported[i];
}

static int parse_ull(const char *value, unsigned long long *out)
{
    char *end;
    if (!isdigit((unsigned char)*value))
        return -1;
    errno = 0;
    *out = strtoull(value, &end, 10);
    return (errno || *end) ? -1 : 0;
}

static int parse_flag(const char *value, unsigned int *out)
{
    if (strcmp(value, "0") == 0 || strcmp(value, "1") == 0) {
        *out = (unsigned int)(value[0] - '0');
        return 0;
    }
    return -1;
}

static int parse_hex32(const char *value, unsigned int *out)
{
    char *end;
    unsigned long long v;
    if (strncmp(value, "0x", 2) != 0 && strncmp(value, "0X", 2) != 0)
        return -1;
    if (!isxdigit((unsigned char)value[2]))
        return -1;
    errno = 0;
    v = strtoull(value + 2, &end, 16);
    if (errno || *end || v > 0xffffffffULL)
        return -1;
    *out = (unsigned int)v;
    return 0;
}

static int parse_bus_id(const char *value, struct fake_device *d)
{
    unsigned int domain, bus, device, function;
    int used = 0;
    if (strlen(value) != 16)
        return -1;
    if (sscanf(value, "%8x:%2x:%2x.%1x%n", &domain, &bus, &device, &function, &used) != 4 || used != 16)
        return -1;
    if (value[8] != ':' || value[11] != ':' || value[14] != '.' || device > 0x1f || function > 7)
        return -1;
    d->domain = domain;
    d->bus = bus;
    d->device = device;
    d->function = function;
    return 0;
}

static int parse_cc(const char *value, struct fake_device *d)
{
    int major, minor, used = 0;
    if (sscanf(value, "%d.%d%n", &major, &minor, &used) != 2 || value[used] || major < 1 || minor < 0)
        return -1;
    d->cc_major = major;
    d->cc_minor = minor;
    d->has_cc = 1;
    return 0;
}

static int parse_uuid(const char *value, const char *prefix)
{
    /* GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx */
    static const int groups[] = {8, 4, 4, 4, 12};
    const char *s = value;
    size_t g;
    if (strncmp(s, prefix, strlen(prefix)) != 0)
        return -1;
    s += strlen(prefix);
    for (g = 0; g < 5; g++) {
        int i;
        for (i = 0; i < groups[g]; i++, s++)
            if (!isxdigit((unsigned char)*s))
                return -1;
        if (g < 4 && *s++ != '-')
            return -1;
    }
    return *s ? -1 : 0;
}

/* Media engines (decoders, JPEG, OFA) of an A100 GPU instance by its slice count. */
static void media_engines(unsigned int slices, unsigned int *decoders, unsigned int *jpeg, unsigned int *ofa)
{
    static const unsigned int dec[8] = {0, 0, 1, 2, 2, 2, 2, 5};
    *decoders = dec[slices];
    *jpeg = slices == 7;
    *ofa = slices == 7;
}

/* Parse [<c>c.]<g>g.<gb>gb[+me|+me.all|+gfx|-me] and fill the attributes a MIG device of it has. */
static int mig_attributes(const struct fake_device *gpu, const char *profile, nvmlDeviceAttributes_t *a)
{
    unsigned int c = 0, g, gb;
    int used = 0;
    const char *rest = profile;
    if (sscanf(rest, "%uc.%n", &c, &used) == 1 && used > 0) {
        if (c < 1 || c > 7)
            return -1;
        rest += used;
    }
    used = 0;
    if (sscanf(rest, "%ug.%ugb%n", &g, &gb, &used) != 2 || used == 0 || g < 1 || g > 7 || gb < 1 || (c && c > g))
        return -1;
    if (!isdigit((unsigned char)rest[0]))
        return -1;
    rest += used;
    memset(a, 0, sizeof(*a));
    a->gpuInstanceSliceCount = g;
    a->computeInstanceSliceCount = c ? c : g;
    a->multiprocessorCount = a->computeInstanceSliceCount * gpu->mig_sm_per_slice;
    a->sharedCopyEngineCount = g;
    a->sharedEncoderCount = 0;
    a->memorySizeMB = (unsigned long long)gb * 1024ULL;
    media_engines(g, &a->sharedDecoderCount, &a->sharedJpegCount, &a->sharedOfaCount);
    if (strcmp(rest, "+me") == 0) {
        a->sharedDecoderCount += 1;
        a->sharedJpegCount += 1;
        a->sharedOfaCount += 1;
    } else if (strcmp(rest, "+me.all") == 0) {
        media_engines(7, &a->sharedDecoderCount, &a->sharedJpegCount, &a->sharedOfaCount);
    } else if (strcmp(rest, "-me") == 0) {
        a->sharedDecoderCount = a->sharedJpegCount = a->sharedOfaCount = 0;
    } else if (*rest && strcmp(rest, "+gfx") != 0) {
        return -1;
    }
    return 0;
}

static struct fake_device *add_mig(struct fake_device *gpu, const char *profile)
{
    struct fake_device *m;
    nvmlDeviceAttributes_t attributes;
    if (strlen(profile) > 20 || mig_attributes(gpu, profile, &attributes))
        return NULL;
    if (gpu->mig_count >= MAX_MIG || st.mig_total >= MAX_GPUS * MAX_MIG)
        return NULL;
    m = &st.migs[st.mig_total++];
    memset(m, 0, sizeof(*m));
    m->magic = DEVICE_MAGIC;
    m->index = gpu->mig_count;
    m->parent = gpu;
    m->attributes = attributes;
    snprintf(m->name, sizeof(m->name), "%.60s MIG %.20s", gpu->name, profile);
    snprintf(m->mig_profile, sizeof(m->mig_profile), "%s", profile);
    /* MIG-<parent uuid digits with the instance number in the last group> */
    snprintf(m->uuid, sizeof(m->uuid), "MIG-%.32s%04x", gpu->uuid + 4, m->index + 1);
    m->memory_total_mib = attributes.memorySizeMB;
    m->pci_device_id = gpu->pci_device_id;
    m->pci_subsystem_id = gpu->pci_subsystem_id;
    m->pci_class = gpu->pci_class;
    m->domain = gpu->domain;
    m->bus = gpu->bus;
    m->device = gpu->device;
    m->function = gpu->function;
    m->cc_major = gpu->cc_major;
    m->cc_minor = gpu->cc_minor;
    m->has_cc = gpu->has_cc;
    gpu->mig[gpu->mig_count++] = m;
    return m;
}

/* Turn \xHH and \\ escapes into bytes, in place. Returns -1 for a bad escape or a NUL byte. */
static int unescape(char *value)
{
    char *in = value, *out = value;
    while (*in) {
        if (*in != '\\') {
            *out++ = *in++;
            continue;
        }
        if (in[1] == '\\') {
            *out++ = '\\';
            in += 2;
            continue;
        }
        if (in[1] == 'x' && isxdigit((unsigned char)in[2]) && isxdigit((unsigned char)in[3])) {
            char hex[3] = {in[2], in[3], 0};
            long byte = strtol(hex, NULL, 16);
            if (byte == 0)
                return -1;
            *out++ = (char)byte;
            in += 4;
            continue;
        }
        return -1;
    }
    *out = '\0';
    return 0;
}

enum gpu_key {
    K_NAME, K_UUID, K_MEMORY, K_MEMORY_USED, K_BUS_ID, K_DEVICE_ID, K_SUBSYSTEM_ID, K_CC,
    K_MIG_MODE, K_MIG_PENDING, K_MAX_MIG, K_MIG_DEVICES, K_PCI_CLASS, K_MIG_SM, K_NOT_SUPPORTED, K_GPU_STATE,
    K_CLOCKS, K_FABRIC_STATE, K_FABRIC_HEALTH, K_RECOVERY, K_FABRIC_MASK, K_PROCESSES, K_PASSTHROUGH,
    K_FAIL_CREATE, K_GPU_KEYS
};
static const char *const gpu_keys[K_GPU_KEYS] = {
    "name", "uuid", "memory_total_mib", "memory_used_mib", "pci_bus_id", "pci_device_id",
    "pci_subsystem_id", "compute_capability", "mig_mode", "mig_pending", "max_mig_devices", "mig_devices",
    "pci_class", "mig_multiprocessors_per_slice", "not_supported", "gpu_state", "clocks_event_reasons",
    "fabric_state", "fabric_health", "recovery_action", "fabric_health_mask", "processes", "mig_passthrough",
    "mig_fail_create_after",
};
/* A [gpu] section's keys: gpu_keys, then health_keys (K_GPU_KEYS + enum health_value). */
#define N_SECTION_KEYS (K_GPU_KEYS + H_VALUES)
static const char *const global_keys[] = {
    "driver_version", "cuda_driver_version", "nvml_version", "fault", "not_supported",
};
#define N_GLOBAL (sizeof(global_keys) / sizeof(global_keys[0]))

static int gpu_key_index(const char *key)
{
    int i;
    for (i = 0; i < K_GPU_KEYS; i++)
        if (strcmp(gpu_keys[i], key) == 0)
            return i;
    for (i = 0; i < H_VALUES; i++)
        if (strcmp(health_keys[i].name, key) == 0)
            return K_GPU_KEYS + i;
    return -1;
}

/* index of value in names (NULL-terminated), or -1 */
static int choice(const char *value, const char *const *names)
{
    int i;
    for (i = 0; names[i]; i++)
        if (strcmp(names[i], value) == 0)
            return i;
    return -1;
}

static int parse_function_list(struct parser *p, char *value, unsigned char *flags)
{
    char *item, *save = NULL;
    for (item = strtok_r(value, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        int i;
        item = trim(item);
        if (!*item)
            continue;
        i = known_index(item);
        if (i < 0)
            return fail(p, p->line, "not_supported names an unknown function '%s'", item);
        flags[i] = 1;
    }
    return 0;
}

static int global_key_index(const char *key)
{
    size_t i;
    for (i = 0; i < N_GLOBAL; i++)
        if (strcmp(global_keys[i], key) == 0)
            return (int)i;
    return -1;
}

/* mig_devices is kept until the section ends: the GPU's name and UUID may follow it. */
static char pending_mig[MAX_GPUS][256];
static int pending_mig_line[MAX_GPUS];

static int set_gpu_key(struct parser *p, struct fake_device *d, int key, char *value)
{
    unsigned long long n;
    switch (key) {
    case K_NAME:
        if (unescape(value))
            return fail(p, p->line, "name has a bad escape (\\xHH, not \\x00, or \\\\)");
        if (!*value || strlen(value) >= 64)
            return fail(p, p->line, "name must be 1 to 63 characters");
        snprintf(d->name, sizeof(d->name), "%s", value);
        return 0;
    case K_UUID:
        if (parse_uuid(value, "GPU-"))
            return fail(p, p->line, "uuid must look like GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, not '%s'", value);
        snprintf(d->uuid, sizeof(d->uuid), "%s", value);
        return 0;
    case K_MEMORY:
    case K_MEMORY_USED:
        if (parse_ull(value, &n) || n > (1ULL << 30))
            return fail(p, p->line, "%s must be a number of MiB, not '%s'", gpu_keys[key], value);
        if (key == K_MEMORY)
            d->memory_total_mib = n;
        else
            d->memory_used_mib = n;
        return 0;
    case K_BUS_ID:
        if (parse_bus_id(value, d))
            return fail(p, p->line, "pci_bus_id must look like 00000000:18:00.0, not '%s'", value);
        return 0;
    case K_DEVICE_ID:
    case K_SUBSYSTEM_ID:
        if (parse_hex32(value, key == K_DEVICE_ID ? &d->pci_device_id : &d->pci_subsystem_id))
            return fail(p, p->line, "%s must be a hexadecimal number like 0x233010DE, not '%s'", gpu_keys[key],
                        value);
        return 0;
    case K_CC:
        if (parse_cc(value, d))
            return fail(p, p->line, "compute_capability must look like 9.0, not '%s'", value);
        return 0;
    case K_MIG_MODE:
    case K_MIG_PENDING:
        if (parse_flag(value, key == K_MIG_MODE ? &d->mig_current : &d->mig_pending))
            return fail(p, p->line, "%s must be 0 or 1, not '%s'", gpu_keys[key], value);
        d->has_mig = 1;
        return 0;
    case K_MAX_MIG:
        if (parse_ull(value, &n) || n > MAX_MIG)
            return fail(p, p->line, "max_mig_devices must be 0 to %d, not '%s'", MAX_MIG, value);
        d->max_mig = (unsigned int)n;
        d->has_mig = 1;
        return 0;
    case K_MIG_DEVICES:
        snprintf(pending_mig[d->index], sizeof(pending_mig[0]), "%s", value);
        pending_mig_line[d->index] = p->line;
        return 0;
    case K_PCI_CLASS:
        if (parse_hex32(value, &d->pci_class) || strlen(value) != 8 || (d->pci_class >> 16) != 0x03)
            return fail(p, p->line, "pci_class must be a display controller class like 0x030200, not '%s'", value);
        return 0;
    case K_MIG_SM:
        if (parse_ull(value, &n) || n < 1 || n > 64)
            return fail(p, p->line, "mig_multiprocessors_per_slice must be 1 to 64, not '%s'", value);
        d->mig_sm_per_slice = (unsigned int)n;
        return 0;
    case K_NOT_SUPPORTED:
        return parse_function_list(p, value, d->not_supported);
    case K_PASSTHROUGH:
        return parse_flag(value, &d->passthrough) ? fail(p, p->line, "mig_passthrough must be 0 or 1, not '%s'", value)
                                                  : 0;
    case K_FAIL_CREATE:
        if (parse_ull(value, &n) || n > 7)
            return fail(p, p->line, "mig_fail_create_after must be 0 to 7, not '%s'", value);
        d->fail_create_after = (int)n;
        return 0;
    case K_PROCESSES: {
        char *item, *save = NULL;
        for (item = strtok_r(value, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
            unsigned int pid;
            int used = 0;
            item = trim(item);
            if (!*item)
                continue;
            if (d->nproc >= 4 || sscanf(item, "%u:%n", &pid, &used) != 1 || used == 0 || !item[used] ||
                strlen(item + used) > 31 || pid == 0)
                return fail(p, p->line, "processes must be up to 4 entries like 4242:python3, not '%s'", item);
            d->pids[d->nproc] = pid;
            snprintf(d->pnames[d->nproc], sizeof(d->pnames[0]), "%s", item + used);
            d->nproc++;
        }
        return 0;
    }
    case K_GPU_STATE: {
        static const char *const names[] = {"ok", "lost", "reset_required", NULL};
        int i = choice(value, names);
        if (i < 0)
            return fail(p, p->line, "gpu_state must be ok, lost or reset_required, not '%s'", value);
        d->state = (enum gpu_state)i;
        return 0;
    }
    case K_CLOCKS:
    case K_FABRIC_MASK: {
        char *end;
        unsigned long long mask = 0;
        int bad = strncmp(value, "0x", 2) != 0 || !isxdigit((unsigned char)value[2]);
        if (!bad) {
            errno = 0;
            mask = strtoull(value + 2, &end, 16);
            bad = errno || *end || (key == K_FABRIC_MASK && mask > 0xffffffffULL);
        }
        if (bad)
            return fail(p, p->line, "%s must be a hexadecimal mask like 0x48, not '%s'", gpu_keys[key], value);
        if (key == K_CLOCKS)
            d->clocks_event_reasons = mask;
        else
            d->fabric_health_mask = (unsigned int)mask;
        return 0;
    }
    case K_FABRIC_STATE: {
        static const char *const names[] = {"not_supported", "not_started", "in_progress", "completed", NULL};
        int i = choice(value, names);
        if (i < 1)
            return fail(p, p->line, "fabric_state must be not_started, in_progress or completed, not '%s'", value);
        d->fabric_state = i;
        return 0;
    }
    case K_FABRIC_HEALTH: {
        static const char *const names[] = {"not_supported", "healthy", "unhealthy", "limited", NULL};
        int i = choice(value, names);
        if (i < 1)
            return fail(p, p->line, "fabric_health must be healthy, unhealthy or limited, not '%s'", value);
        d->fabric_health = i;
        return 0;
    }
    case K_RECOVERY: {
        static const char *const names[] = {"none", "gpu_reset", "node_reboot", "drain_p2p", "drain_and_reset",
                                            NULL};
        int i = choice(value, names);
        if (i < 0 && strcmp(value, "not_supported") != 0)
            return fail(p, p->line,
                        "recovery_action must be none, gpu_reset, node_reboot, drain_p2p, drain_and_reset or "
                        "not_supported, not '%s'", value);
        d->recovery_action = i;
        return 0;
    }
    }
    if (key >= K_GPU_KEYS && key < N_SECTION_KEYS) {
        int h = key - K_GPU_KEYS;
        if (parse_ull(value, &n) || n > health_keys[h].max)
            return fail(p, p->line, "%s must be a number from 0 to %llu, not '%s'", health_keys[h].name,
                        health_keys[h].max, value);
        d->health[h] = n;
        return 0;
    }
    return -1;
}

static int set_global_key(struct parser *p, int key, char *value)
{
    unsigned long long n;
    switch (key) {
    case 0: /* driver_version */
        if (unescape(value))
            return fail(p, p->line, "driver_version has a bad escape (\\xHH, not \\x00, or \\\\)");
        if (!*value || strlen(value) >= 64)
            return fail(p, p->line, "driver_version must be 1 to 63 characters");
        snprintf(st.driver_version, sizeof(st.driver_version), "%s", value);
        st.has_driver_version = 1;
        return 0;
    case 1: /* cuda_driver_version */
        if (parse_ull(value, &n) || n < 1000 || n > 99999)
            return fail(p, p->line, "cuda_driver_version must be an integer like 12020 (CUDA 12.2), not '%s'",
                        value);
        st.cuda_driver_version = (int)n;
        st.has_cuda_version = 1;
        return 0;
    case 2: /* nvml_version */
        if (!*value || strlen(value) >= 80)
            return fail(p, p->line, "nvml_version must be 1 to 79 characters");
        snprintf(st.nvml_version, sizeof(st.nvml_version), "%s", value);
        st.has_nvml_version = 1;
        return 0;
    case 3: /* fault */
        if (strcmp(value, "none") == 0)
            st.fault = FAULT_NONE;
        else if (strcmp(value, "driver_not_loaded") == 0)
            st.fault = FAULT_DRIVER_NOT_LOADED;
        else if (strcmp(value, "no_permission") == 0)
            st.fault = FAULT_NO_PERMISSION;
        else if (strcmp(value, "unknown") == 0)
            st.fault = FAULT_UNKNOWN;
        else if (strcmp(value, "hang") == 0)
            st.fault = FAULT_HANG;
        else
            return fail(p, p->line,
                        "fault must be none, driver_not_loaded, no_permission, unknown or hang, not '%s'", value);
        return 0;
    case 4: /* not_supported */
        return parse_function_list(p, value, st.not_supported);
    }
    return -1;
}

static int finish_gpu(struct parser *p, struct fake_device *d)
{
    static const int required[] = {K_NAME, K_UUID, K_MEMORY, K_BUS_ID, K_DEVICE_ID};
    size_t i;
    char *item, *save = NULL;
    for (i = 0; i < sizeof(required) / sizeof(required[0]); i++)
        if (!(d->seen & (1ULL << required[i])))
            return fail(p, d->header_line, "[gpu] section %u lacks '%s'", d->index, gpu_keys[required[i]]);
    if (d->memory_used_mib > d->memory_total_mib)
        return fail(p, d->header_line, "[gpu] section %u uses more memory than it has", d->index);
    if (d->has_mig && !(d->seen & (1ULL << K_MIG_MODE)))
        return fail(p, d->header_line, "[gpu] section %u sets MIG keys without mig_mode", d->index);
    if (d->has_mig && !(d->seen & (1ULL << K_MIG_PENDING)))
        d->mig_pending = d->mig_current;
    if (!(d->seen & (1ULL << (K_GPU_KEYS + H_PCIE_GEN_MAX))))
        d->health[H_PCIE_GEN_MAX] = !d->has_cc ? 3 : d->cc_major >= 9 ? 5 : d->cc_major == 8 ? 4 : 3;
    if (!(d->seen & (1ULL << (K_GPU_KEYS + H_PCIE_GEN))))
        d->health[H_PCIE_GEN] = d->health[H_PCIE_GEN_MAX];
    if (!(d->seen & (1ULL << (K_GPU_KEYS + H_PCIE_WIDTH))))
        d->health[H_PCIE_WIDTH] = d->health[H_PCIE_WIDTH_MAX];
    if (d->health[H_PCIE_GEN] > d->health[H_PCIE_GEN_MAX] || d->health[H_PCIE_WIDTH] > d->health[H_PCIE_WIDTH_MAX])
        return fail(p, d->header_line, "[gpu] section %u has a PCIe link above its maximum", d->index);
    if ((d->seen & ((1ULL << K_FABRIC_HEALTH) | (1ULL << K_FABRIC_MASK))) && d->fabric_state < 0)
        return fail(p, d->header_line, "[gpu] section %u sets fabric_health without fabric_state", d->index);
    if (pending_mig[d->index][0]) {
        int line = pending_mig_line[d->index];
        if (!d->has_mig || !d->mig_current)
            return fail(p, line, "mig_devices needs mig_mode = 1");
        for (item = strtok_r(pending_mig[d->index], ",", &save); item; item = strtok_r(NULL, ",", &save)) {
            item = trim(item);
            if (!*item)
                continue;
            if (d->mig_count >= d->max_mig)
                return fail(p, line, "mig_devices lists more devices than max_mig_devices");
            if (!add_mig(d, item))
                return fail(p, line, "mig_devices entry '%s' must look like 3g.20gb, 1c.3g.20gb or 1g.10gb+me", item);
        }
    }
    for (i = 0; i < d->index; i++) {
        if (strcmp(st.gpus[i].uuid, d->uuid) == 0)
            return fail(p, d->header_line, "[gpu] section %u repeats the uuid of section %zu", d->index, i);
        if (st.gpus[i].domain == d->domain && st.gpus[i].bus == d->bus && st.gpus[i].device == d->device &&
            st.gpus[i].function == d->function)
            return fail(p, d->header_line, "[gpu] section %u repeats the pci_bus_id of section %zu", d->index, i);
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* MIG state: GPU and compute instances, kept across processes        */
/*
 * A GPU whose pci_device_id is one of mig_models (A100-SXM4-40GB, A100-SXM4-80GB, H100 80GB HBM3, H200)
 * has NVML's MIG management: profile info, possible placements, GPU and compute instances. Its MIG
 * devices (nvmlDeviceGetMigDeviceHandleByIndex) are its compute instances, in GPU-instance id order.
 * The MIG mode and the instances live in the state file $FAKENVML_STATE, written atomically (a
 * temporary file renamed over it) after every change; without the variable they last as long as the
 * process. The first time (no state file yet) the profile's mig_mode/mig_pending/mig_devices seed it.
 * The state counts its writes ("writes = N"): a caller that changed nothing left it as it was.
 * A GPU of another model, or whose mig_devices its model's table cannot hold (profiles it does not
 * have, more than fit), keeps the profile's fixed mig_devices and answers the management calls
 * NOT_SUPPORTED.
 */
#define MAX_GI 8
#define MAX_CI 8
#define GI_MAGIC 0x46474931u /* "FGI1" */
#define CI_MAGIC 0x46434931u /* "FCI1" */
#define PROFILE_INFO_V2 0x02000098u
#define CI_PROFILE_INFO_V2 0x02000088u

/* The GPU-instance profiles of a model: NVML_GPU_INSTANCE_PROFILE_* constant, profile info id, slices,
 * instances, eighths of the GPU's memory, placements (first start, step, count, size). Shape of
 * REFERENCE 8.1 / tests/support/mig_profiles.py (nvidia-smi mig -lgip -p on an A100-SXM4-40GB). */
static const struct mig_shape {
    unsigned int constant, id, slices, instances, eighths, first, step, count, size;
} mig_shapes[7] = {
    {0, 19, 1, 7, 1, 0, 1, 7, 1}, /* 1g */
    {7, 20, 1, 1, 1, 0, 1, 7, 1}, /* 1g+me (PROFILE_1_SLICE_REV1) */
    {9, 15, 1, 4, 2, 0, 2, 4, 2}, /* 1g with twice the memory (PROFILE_1_SLICE_REV2) */
    {1, 14, 2, 3, 2, 0, 2, 3, 2}, /* 2g */
    {2, 9, 3, 2, 4, 0, 4, 2, 4},  /* 3g */
    {3, 5, 4, 1, 4, 0, 4, 1, 4},  /* 4g */
    {4, 0, 7, 1, 8, 0, 8, 1, 8},  /* 7g */
};

/* Per model: PCI device id, the memory the tables were taken for, names and memory (MiB) per shape
 * (go-nvml pkg/nvml/mock/gpus/a100.go, h100.go, h200.go, as tests/support/mig_profiles.py holds them). */
static const struct mig_model {
    unsigned int pci_device_id;
    unsigned long long table_mib;
    const char *names[7];
    unsigned long long mib[7];
} mig_models[] = {
    {0x20B010DE, 40960, {"1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"},
     {4864, 4864, 9856, 9856, 19968, 19968, 40192}},
    {0x20B210DE, 81920, {"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"},
     {9856, 9856, 19968, 19968, 40192, 40192, 80384}},
    {0x233010DE, 81920, {"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"},
     {10240, 10240, 20480, 20480, 40960, 40960, 81920}},
    {0x233510DE, 144384, {"1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"},
     {18432, 18432, 35840, 35840, 72704, 72704, 144384}},
};
#define N_MODELS (sizeof(mig_models) / sizeof(mig_models[0]))

struct fake_gi;
struct fake_ci {
    unsigned int magic;
    struct fake_gi *gi;
    unsigned int id, slices;
};
struct fake_gi {
    unsigned int magic;
    struct fake_device *gpu;
    unsigned int id, shape, start, size;
    struct fake_ci ci[MAX_CI];
};
static struct {
    unsigned long long writes;
    struct fake_gi gi[MAX_GPUS][MAX_GI];
} mig;


static int shape_by_name(const struct fake_device *gpu, const char *name)
{
    int i;
    for (i = 0; i < 7; i++)
        if (strcmp(mig_models[gpu->model].names[i], name) == 0)
            return i;
    return -1;
}

static unsigned int used_slices(unsigned int gpu)
{
    unsigned int i, used = 0;
    for (i = 0; i < MAX_GI; i++)
        if (mig.gi[gpu][i].magic == GI_MAGIC)
            used |= ((1u << mig.gi[gpu][i].size) - 1) << mig.gi[gpu][i].start;
    return used;
}


/* Add a GPU instance of shape at start (checked by the caller); returns it, NULL when no slot or id is free. */
static struct fake_gi *gi_add(struct fake_device *gpu, unsigned int shape, unsigned int start, unsigned int id)
{
    unsigned int i, j;
    struct fake_gi *slot = NULL;
    if (!id) { /* the lowest free id from 1 */
        for (id = 1; id <= MAX_GI * 2; id++) {
            for (j = 0; j < MAX_GI; j++)
                if (mig.gi[gpu->index][j].magic == GI_MAGIC && mig.gi[gpu->index][j].id == id)
                    break;
            if (j == MAX_GI)
                break;
        }
    }
    for (i = 0; i < MAX_GI && !slot; i++)
        if (mig.gi[gpu->index][i].magic != GI_MAGIC)
            slot = &mig.gi[gpu->index][i];
    if (!slot)
        return NULL;
    memset(slot, 0, sizeof(*slot));
    slot->magic = GI_MAGIC;
    slot->gpu = gpu;
    slot->id = id;
    slot->shape = shape;
    slot->start = start;
    slot->size = mig_shapes[shape].size;
    return slot;
}

/* Add a compute instance (id: the given one, or -1 for the lowest free id from 0); NULL when none is free. */
static struct fake_ci *ci_add(struct fake_gi *gi, unsigned int slices, int want_id)
{
    struct fake_ci *ci = NULL;
    unsigned int i, id = 0;
    if (want_id >= 0) {
        id = (unsigned int)want_id;
    } else {
        for (id = 0; id < MAX_CI; id++) {
            for (i = 0; i < MAX_CI; i++)
                if (gi->ci[i].magic == CI_MAGIC && gi->ci[i].id == id)
                    break;
            if (i == MAX_CI)
                break;
        }
    }
    for (i = 0; i < MAX_CI && !ci; i++)
        if (gi->ci[i].magic != CI_MAGIC)
            ci = &gi->ci[i];
    if (!ci)
        return NULL;
    ci->magic = CI_MAGIC;
    ci->gi = gi;
    ci->id = id;
    ci->slices = slices;
    return ci;
}

/* The memory of a profile on this GPU: the table's value, scaled down to a GPU with less memory and kept
 * below the profile's eighths of the GPU so that go-nvlib's naming (getMigMemorySizeGB) gives its name. */
static unsigned long long shape_mib(const struct fake_device *gpu, unsigned int shape)
{
    const struct mig_model *m = &mig_models[gpu->model];
    unsigned long long mib = m->mib[shape], cap;
    if (gpu->memory_total_mib < m->table_mib)
        mib = mib * gpu->memory_total_mib / m->table_mib;
    cap = mig_shapes[shape].eighths * gpu->memory_total_mib / 8 - 64ULL * mig_shapes[shape].eighths;
    return mib < cap ? mib : cap;
}

/* Rebuild the MIG devices of every GPU with a model from its instances (GPU instance id order). A MIG device's
 * memory is its GPU instance profile's memorySizeMB, as NVML reports it (nvidia-smi: 4864MiB for a 1g.5gb of an
 * A100-SXM4-40GB), not the profile name's rounded GB. */
static void mig_rebuild(void)
{
    static char keep[MAX_GPUS * MAX_MIG][24];
    static unsigned int keep_gpu[MAX_GPUS * MAX_MIG];
    unsigned int i, j, k, n = 0, id;
    for (i = 0; i < st.mig_total; i++)
        if (st.migs[i].parent->model < 0) {
            snprintf(keep[n], sizeof(keep[0]), "%s", st.migs[i].mig_profile);
            keep_gpu[n++] = st.migs[i].parent->index;
        }
    st.mig_total = 0;
    memset(st.migs, 0, sizeof(st.migs));
    for (i = 0; i < st.gpu_count; i++)
        st.gpus[i].mig_count = 0;
    for (i = 0; i < n; i++)
        add_mig(&st.gpus[keep_gpu[i]], keep[i]);
    for (i = 0; i < st.gpu_count; i++) {
        struct fake_device *gpu = &st.gpus[i];
        if (gpu->model < 0)
            continue;
        for (id = 1; id <= MAX_GI * 2; id++)
            for (j = 0; j < MAX_GI; j++) {
                struct fake_gi *gi = &mig.gi[i][j];
                if (gi->magic != GI_MAGIC || gi->id != id)
                    continue;
                for (k = 0; k < MAX_CI; k++) {
                    char profile[24];
                    if (gi->ci[k].magic != CI_MAGIC)
                        continue;
                    const char *name = mig_models[gpu->model].names[gi->shape];
                    if (gi->ci[k].slices == mig_shapes[gi->shape].slices)
                        snprintf(profile, sizeof(profile), "%s", name);
                    else
                        snprintf(profile, sizeof(profile), "%uc.%.20s", gi->ci[k].slices, name);
                    struct fake_device *m = add_mig(gpu, profile);
                    if (m)
                        m->attributes.memorySizeMB = m->memory_total_mib = shape_mib(gpu, gi->shape);
                }
            }
    }
}

static const char *state_path(void)
{
    const char *path = getenv("FAKENVML_STATE");
    return path && *path ? path : NULL;
}


/* Seed the instances of the GPUs with a model from the profile's mig_devices (first free placement). */
static int mig_seed(void)
{
    unsigned int i, j;
    for (i = 0; i < st.gpu_count; i++) {
        struct fake_device *gpu = &st.gpus[i];
        if (gpu->model < 0)
            continue;
        for (j = 0; j < st.mig_total; j++) {
            struct fake_device *m = &st.migs[j];
            unsigned int c = 0, s, p;
            int used = 0, shape;
            const char *gi_name = m->mig_profile;
            struct fake_gi *gi = NULL;
            if (m->parent != gpu)
                continue;
            if (sscanf(gi_name, "%uc.%n", &c, &used) == 1 && used > 0)
                gi_name += used;
            shape = shape_by_name(gpu, gi_name);
            if (shape < 0)
                break;
            s = (unsigned int)shape;
            for (p = 0; p < mig_shapes[s].count && !gi; p++) {
                unsigned int start = mig_shapes[s].first + p * mig_shapes[s].step;
                if (!(used_slices(i) & (((1u << mig_shapes[s].size) - 1) << start)))
                    gi = gi_add(gpu, s, start, 0);
            }
            if (!gi)
                break;
            ci_add(gi, c ? c : mig_shapes[s].slices, -1);
        }
        if (j < st.mig_total) { /* mig_devices the table cannot hold: fixed devices, no MIG management */
            memset(mig.gi[i], 0, sizeof(mig.gi[i]));
            gpu->model = -1;
        }
    }
    return 0;
}

/* Read $FAKENVML_STATE over the seeded state; returns 0 or -1 (a message on stderr). */
static int mig_load(void)
{
    const char *path = state_path();
    FILE *f;
    char buf[512];
    int line = 0, seen_gpu[MAX_GPUS] = {0};
    if (!path || !(f = fopen(path, "r")))
        return 0;
    while (fgets(buf, sizeof(buf), f)) {
        unsigned int g, a, b, c, d;
        unsigned long long n;
        char uuid[NAME_LEN];
        line++;
        if (buf[0] == '#' || buf[0] == '\n')
            continue;
        if (sscanf(buf, "writes = %llu", &n) == 1) {
            mig.writes = n;
        } else if (sscanf(buf, "mode = %u %95s %u %u", &g, uuid, &a, &b) == 4 && g < st.gpu_count &&
                   strcmp(st.gpus[g].uuid, uuid) == 0 && a <= 1 && b <= 1) {
            if (!seen_gpu[g])
                memset(mig.gi[g], 0, sizeof(mig.gi[g]));
            seen_gpu[g] = 1;
            st.gpus[g].mig_current = a;
            st.gpus[g].mig_pending = b;
        } else if (sscanf(buf, "gi = %u %u %u %u %u", &g, &a, &b, &c, &d) == 5 && g < st.gpu_count && seen_gpu[g] &&
                   st.gpus[g].model >= 0) {
            unsigned int s;
            for (s = 0; s < 7 && mig_shapes[s].id != b; s++)
                ;
            if (s == 7 || !gi_add(&st.gpus[g], s, c, a))
                goto bad;
        } else if (sscanf(buf, "ci = %u %u %u %u", &g, &a, &b, &c) == 4 && g < st.gpu_count) {
            unsigned int j;
            for (j = 0; j < MAX_GI; j++)
                if (mig.gi[g][j].magic == GI_MAGIC && mig.gi[g][j].id == a)
                    break;
            if (j == MAX_GI || b >= MAX_CI || !ci_add(&mig.gi[g][j], c, (int)b))
                goto bad;
        } else {
            goto bad;
        }
    }
    fclose(f);
    return 0;
bad:
    fclose(f);
    fprintf(stderr, "fakenvml: %s:%d: not a MIG state line (or one for another profile)\n", path, line);
    return -1;
}

/* After the profile is read: models, the seed, the state file, the MIG devices. */
static int mig_state_init(void)
{
    unsigned int i, m;
    memset(&mig, 0, sizeof(mig));
    for (i = 0; i < st.gpu_count; i++)
        for (m = 0; m < N_MODELS; m++)
            if (st.gpus[i].has_mig && st.gpus[i].pci_device_id == mig_models[m].pci_device_id)
                st.gpus[i].model = (int)m;
    if (mig_seed() || mig_load())
        return -1;
    mig_rebuild();
    return 0;
}

/* Read the configuration into st. Returns an NVML status for nvmlInit. */
static nvmlReturn_t load_config(void)
{
    struct parser p = {0};
    FILE *f;
    char buf[1024];
    struct fake_device *gpu = NULL;
    unsigned int global_seen = 0;
    int rc = 0;

    p.path = getenv("FAKENVML_CONFIG");
    if (!p.path || !*p.path)
        p.path = "/etc/fakenvml/gpus.conf";

    memset(&st, 0, sizeof(st));
    memset(pending_mig, 0, sizeof(pending_mig));
    f = fopen(p.path, "r");
    if (!f) {
        if (errno == ENOENT || errno == ENOTDIR)
            return NVML_ERROR_DRIVER_NOT_LOADED;
        if (errno == EACCES || errno == EPERM)
            return NVML_ERROR_NO_PERMISSION;
        fprintf(stderr, "fakenvml: %s: %s\n", p.path, strerror(errno));
        return NVML_ERROR_UNKNOWN;
    }
    while (rc == 0 && fgets(buf, sizeof(buf), f)) {
        char *line, *hash, *eq, *key, *value;
        int k;
        p.line++;
        if (!strchr(buf, '\n') && !feof(f)) {
            rc = fail(&p, p.line, "line longer than %zu characters", sizeof(buf) - 2);
            break;
        }
        hash = strchr(buf, '#');
        if (hash)
            *hash = '\0';
        line = trim(buf);
        if (!*line)
            continue;
        if (line[0] == '[') {
            if (strcmp(line, "[gpu]") != 0) {
                rc = fail(&p, p.line, "unknown section '%s' (only [gpu])", line);
                break;
            }
            if (gpu && (rc = finish_gpu(&p, gpu)) != 0)
                break;
            if (st.gpu_count >= MAX_GPUS) {
                rc = fail(&p, p.line, "more than %d [gpu] sections", MAX_GPUS);
                break;
            }
            gpu = &st.gpus[st.gpu_count];
            gpu->magic = DEVICE_MAGIC;
            gpu->index = st.gpu_count++;
            gpu->header_line = p.line;
            gpu->pci_class = 0x030200;
            gpu->mig_sm_per_slice = 14;
            for (k = 0; k < H_VALUES; k++)
                gpu->health[k] = health_keys[k].fallback;
            gpu->fabric_state = -1;
            gpu->fabric_health = 1;
            gpu->recovery_action = 0;
            gpu->model = -1;
            gpu->fail_create_after = -1;
            gpu->not_supported = st.gpu_not_supported[gpu->index];
            continue;
        }
        eq = strchr(line, '=');
        if (!eq) {
            rc = fail(&p, p.line, "expected 'key = value' or '[gpu]', got '%s'", line);
            break;
        }
        *eq = '\0';
        key = trim(line);
        value = trim(eq + 1);
        if (!*key) {
            rc = fail(&p, p.line, "missing key before '='");
            break;
        }
        if (gpu) {
            k = gpu_key_index(key);
            if (k < 0) {
                rc = fail(&p, p.line, global_key_index(key) >= 0 ? "'%s' belongs before the first [gpu] section"
                                                                  : "unknown key '%s' in a [gpu] section",
                          key);
                break;
            }
            if (gpu->seen & (1ULL << k)) {
                rc = fail(&p, p.line, "'%s' given twice in one [gpu] section", key);
                break;
            }
            gpu->seen |= 1ULL << k;
            rc = set_gpu_key(&p, gpu, k, value);
        } else {
            k = global_key_index(key);
            if (k < 0) {
                rc = fail(&p, p.line, gpu_key_index(key) >= 0 ? "'%s' belongs in a [gpu] section"
                                                              : "unknown key '%s'",
                          key);
                break;
            }
            if (global_seen & (1u << k)) {
                rc = fail(&p, p.line, "'%s' given twice", key);
                break;
            }
            global_seen |= 1u << k;
            rc = set_global_key(&p, k, value);
        }
    }
    if (rc == 0 && ferror(f))
        rc = fail(&p, p.line, "read error: %s", strerror(errno));
    fclose(f);
    if (rc == 0 && gpu)
        rc = finish_gpu(&p, gpu);
    if (rc == 0 && st.fault == FAULT_NONE && !st.has_driver_version)
        rc = fail(&p, p.line, "driver_version is required");
    if (rc == 0 && st.fault == FAULT_NONE && !st.has_cuda_version)
        rc = fail(&p, p.line, "cuda_driver_version is required");
    if (rc == 0 && st.fault == FAULT_NONE && mig_state_init() != 0)
        rc = -1;
    if (rc != 0) {
        memset(&st, 0, sizeof(st));
        return NVML_ERROR_UNKNOWN;
    }
    if (!st.has_nvml_version)
        snprintf(st.nvml_version, sizeof(st.nvml_version), "%d.%.64s", st.cuda_driver_version / 1000,
                 st.driver_version);
    switch (st.fault) {
    case FAULT_DRIVER_NOT_LOADED:
        return NVML_ERROR_DRIVER_NOT_LOADED;
    case FAULT_NO_PERMISSION:
        return NVML_ERROR_NO_PERMISSION;
    case FAULT_UNKNOWN:
        return NVML_ERROR_UNKNOWN;
    case FAULT_HANG:
        for (;;)
            sleep(3600);
    case FAULT_NONE:
        break;
    }
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Helpers for the API                                                */

static int valid_device(nvmlDevice_t d)
{
    /* Compare addresses first: a handle this library never gave out is not dereferenced. */
    uintptr_t p = (uintptr_t)d, gpus = (uintptr_t)st.gpus, migs = (uintptr_t)st.migs;
    size_t size = sizeof(struct fake_device);
    if (p >= gpus && p < gpus + st.gpu_count * size && (p - gpus) % size == 0)
        return d->magic == DEVICE_MAGIC;
    if (p >= migs && p < migs + st.mig_total * size && (p - migs) % size == 0)
        return d->magic == DEVICE_MAGIC;
    return 0;
}

/* Common entry checks: initialised, valid handle, not marked unsupported. */
#define CHECK_INIT(fn)                                                                                               \
    do {                                                                                                             \
        if (st.init_count <= 0)                                                                                      \
            return NVML_ERROR_UNINITIALIZED;                                                                         \
        if (unsupported(fn))                                                                                         \
            return NVML_ERROR_NOT_SUPPORTED;                                                                         \
    } while (0)

#define CHECK_DEVICE(fn, dev)                                                                                        \
    do {                                                                                                             \
        CHECK_INIT(fn);                                                                                              \
        if (!valid_device(dev))                                                                                      \
            return NVML_ERROR_INVALID_ARGUMENT;                                                                      \
    } while (0)

static nvmlReturn_t copy_string(char *dst, unsigned int length, const char *src)
{
    if (!dst)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Initialisation                                                     */

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    nvmlReturn_t rc;
    (void)flags;
    if (st.init_count > 0) {
        st.init_count++;
        return NVML_SUCCESS;
    }
    rc = load_config();
    if (rc == NVML_SUCCESS)
        st.init_count = 1;
    return rc;
}

EXPORT nvmlReturn_t nvmlInit_v2(void)
{
    return nvmlInitWithFlags(0);
}

EXPORT nvmlReturn_t nvmlInit(void)
{
    return nvmlInitWithFlags(0);
}

EXPORT nvmlReturn_t nvmlShutdown(void)
{
    if (st.init_count <= 0)
        return NVML_ERROR_UNINITIALIZED;
    st.init_count--;
    return NVML_SUCCESS;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Ran out of critical resources, other than memory";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

/* ------------------------------------------------------------------ */
/* System queries                                                     */

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    CHECK_INIT("nvmlSystemGetDriverVersion");
    return copy_string(version, length, st.driver_version);
}

EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    CHECK_INIT("nvmlSystemGetNVMLVersion");
    return copy_string(version, length, st.nvml_version);
}

static nvmlReturn_t cuda_driver_version(const char *fn, int *version)
{
    CHECK_INIT(fn);
    if (!version)
        return NVML_ERROR_INVALID_ARGUMENT;
    *version = st.cuda_driver_version;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version)
{
    return cuda_driver_version("nvmlSystemGetCudaDriverVersion", version);
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version)
{
    return cuda_driver_version("nvmlSystemGetCudaDriverVersion_v2", version);
}

/* ------------------------------------------------------------------ */
/* Device enumeration                                                 */

static nvmlReturn_t device_count(const char *fn, unsigned int *count)
{
    CHECK_INIT(fn);
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = st.gpu_count;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
    return device_count("nvmlDeviceGetCount_v2", count);
}

EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *count)
{
    return device_count("nvmlDeviceGetCount", count);
}

static nvmlReturn_t handle_by_index(const char *fn, unsigned int index, nvmlDevice_t *device)
{
    CHECK_INIT(fn);
    if (!device || index >= st.gpu_count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &st.gpus[index];
    return NVML_SUCCESS;
}

static nvmlReturn_t lost_or_index(const char *fn, unsigned int index, nvmlDevice_t *device);

/* A GPU fallen off the bus (gpu_state = lost): NVML hands out no handle for it. */
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    return lost_or_index("nvmlDeviceGetHandleByIndex_v2", index, device);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return lost_or_index("nvmlDeviceGetHandleByIndex", index, device);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    unsigned int i;
    CHECK_INIT("nvmlDeviceGetHandleByUUID");
    if (!uuid || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (i = 0; i < st.gpu_count; i++)
        if (strcmp(st.gpus[i].uuid, uuid) == 0) {
            *device = &st.gpus[i];
            return NVML_SUCCESS;
        }
    for (i = 0; i < st.mig_total; i++)
        if (strcmp(st.migs[i].uuid, uuid) == 0) {
            *device = &st.migs[i];
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}

static nvmlReturn_t handle_by_bus_id(const char *fn, const char *bus_id, nvmlDevice_t *device)
{
    unsigned int domain, bus, dev, function, i;
    int used = 0;
    CHECK_INIT(fn);
    if (!bus_id || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    /* NVML accepts both 0000:18:00.0 and 00000000:18:00.0 */
    if (sscanf(bus_id, "%x:%x:%x.%x%n", &domain, &bus, &dev, &function, &used) != 4 || bus_id[used])
        return NVML_ERROR_INVALID_ARGUMENT;
    for (i = 0; i < st.gpu_count; i++) {
        const struct fake_device *d = &st.gpus[i];
        if (d->domain == domain && d->bus == bus && d->device == dev && d->function == function) {
            *device = &st.gpus[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *bus_id, nvmlDevice_t *device)
{
    return handle_by_bus_id("nvmlDeviceGetHandleByPciBusId_v2", bus_id, device);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *bus_id, nvmlDevice_t *device)
{
    return handle_by_bus_id("nvmlDeviceGetHandleByPciBusId", bus_id, device);
}

static nvmlReturn_t lost_or_index(const char *fn, unsigned int index, nvmlDevice_t *device)
{
    nvmlReturn_t rc = handle_by_index(fn, index, device);
    if (rc == NVML_SUCCESS && (*device)->state == STATE_LOST) {
        *device = NULL;
        return NVML_ERROR_GPU_IS_LOST;
    }
    return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    CHECK_DEVICE("nvmlDeviceGetIndex", device);
    if (!index || device->parent)
        return NVML_ERROR_INVALID_ARGUMENT;
    *index = device->index;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minor)
{
    CHECK_DEVICE("nvmlDeviceGetMinorNumber", device);
    if (!minor || device->parent)
        return NVML_ERROR_INVALID_ARGUMENT;
    *minor = device->index;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Device queries                                                     */

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    CHECK_DEVICE("nvmlDeviceGetName", device);
    return copy_string(name, length, device->name);
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    CHECK_DEVICE("nvmlDeviceGetUUID", device);
    return copy_string(uuid, length, device->uuid);
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    CHECK_DEVICE("nvmlDeviceGetMemoryInfo", device);
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    memory->total = device->memory_total_mib * MIB;
    memory->used = device->memory_used_mib * MIB;
    memory->free = memory->total - memory->used;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    CHECK_DEVICE("nvmlDeviceGetMemoryInfo_v2", device);
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != NVML_MEMORY_V2_VERSION)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    memory->total = device->memory_total_mib * MIB;
    memory->reserved = 0;
    memory->used = device->memory_used_mib * MIB;
    memory->free = memory->total - memory->used;
    return NVML_SUCCESS;
}

static nvmlReturn_t pci_info(const char *fn, nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    CHECK_DEVICE(fn, device);
    if (!pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof(*pci));
    pci->domain = device->domain;
    pci->bus = device->bus;
    pci->device = device->device;
    pci->pciDeviceId = device->pci_device_id;
    pci->pciSubSystemId = device->pci_subsystem_id;
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.%X", device->domain & 0xffff,
             device->bus & 0xff, device->device & 0x1f, device->function & 0x7);
    snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.%X", device->domain, device->bus & 0xff,
             device->device & 0x1f, device->function & 0x7);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    return pci_info("nvmlDeviceGetPciInfo_v3", device, pci);
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    return pci_info("nvmlDeviceGetPciInfo_v2", device, pci);
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    return pci_info("nvmlDeviceGetPciInfo", device, pci);
}

#ifndef FAKENVML_LEGACY
EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    CHECK_DEVICE("nvmlDeviceGetCudaComputeCapability", device);
    if (!major || !minor)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!device->has_cc)
        return NVML_ERROR_NOT_SUPPORTED;
    *major = device->cc_major;
    *minor = device->cc_minor;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *current, unsigned int *pending)
{
    CHECK_DEVICE("nvmlDeviceGetMigMode", device);
    if (!current || !pending || device->parent)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!device->has_mig)
        return NVML_ERROR_NOT_SUPPORTED;
    *current = device->mig_current;
    *pending = device->mig_pending;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    CHECK_DEVICE("nvmlDeviceGetMaxMigDeviceCount", device);
    if (!count || device->parent)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!device->has_mig)
        return NVML_ERROR_NOT_SUPPORTED;
    *count = device->max_mig;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                        nvmlDevice_t *mig)
{
    CHECK_DEVICE("nvmlDeviceGetMigDeviceHandleByIndex", device);
    if (!mig || device->parent)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!device->has_mig)
        return NVML_ERROR_NOT_SUPPORTED;
    if (index >= device->max_mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!device->mig_current || index >= device->mig_count)
        return NVML_ERROR_NOT_FOUND;
    *mig = device->mig[index];
    return NVML_SUCCESS;
}

static nvmlReturn_t attributes(const char *fn, nvmlDevice_t device, nvmlDeviceAttributes_t *out)
{
    CHECK_DEVICE(fn, device);
    if (!out)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!device->parent)
        return NVML_ERROR_NOT_SUPPORTED;
    *out = device->attributes;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetAttributes(nvmlDevice_t device, nvmlDeviceAttributes_t *out)
{
    return attributes("nvmlDeviceGetAttributes", device, out);
}

#ifndef FAKENVML_NO_ATTRIBUTES_V2
EXPORT nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *out)
{
    return attributes("nvmlDeviceGetAttributes_v2", device, out);
}
#endif
#endif

EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *is_mig)
{
    CHECK_DEVICE("nvmlDeviceIsMigDeviceHandle", device);
    if (!is_mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    *is_mig = device->parent != NULL;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t mig, nvmlDevice_t *device)
{
    CHECK_DEVICE("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", mig);
    if (!device || !mig->parent)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = mig->parent;
    return NVML_SUCCESS;
}

#ifndef FAKENVML_LEGACY
static unsigned int gi_count(unsigned int gpu)
{
    unsigned int i, n = 0;
    for (i = 0; i < MAX_GI; i++)
        n += mig.gi[gpu][i].magic == GI_MAGIC;
    return n;
}

/* Write the state atomically; returns 0, or -1 (the caller answers NVML_ERROR_UNKNOWN). */
static int mig_save(void)
{
    const char *path = state_path();
    char tmp[4096];
    FILE *f;
    unsigned int i, j, k;
    mig.writes++;
    mig_rebuild();
    if (!path)
        return 0;
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
    f = fopen(tmp, "w");
    if (!f) {
        fprintf(stderr, "fakenvml: %s: %s\n", tmp, strerror(errno));
        return -1;
    }
    fprintf(f, "# fakenvml MIG state (tests/support/fakenvml/fakenvml.c)\nwrites = %llu\n", mig.writes);
    for (i = 0; i < st.gpu_count; i++) {
        if (!st.gpus[i].has_mig)
            continue;
        fprintf(f, "mode = %u %s %u %u\n", i, st.gpus[i].uuid, st.gpus[i].mig_current, st.gpus[i].mig_pending);
        for (j = 0; j < MAX_GI; j++) {
            struct fake_gi *gi = &mig.gi[i][j];
            if (gi->magic != GI_MAGIC)
                continue;
            fprintf(f, "gi = %u %u %u %u %u\n", i, gi->id, mig_shapes[gi->shape].id, gi->start, gi->size);
            for (k = 0; k < MAX_CI; k++)
                if (gi->ci[k].magic == CI_MAGIC)
                    fprintf(f, "ci = %u %u %u %u\n", i, gi->id, gi->ci[k].id, gi->ci[k].slices);
        }
    }
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        fprintf(stderr, "fakenvml: %s: %s\n", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* MIG management (the MIG state section above keeps what it changes) */

typedef struct fake_gi *nvmlGpuInstance_t;
typedef struct fake_ci *nvmlComputeInstance_t;
typedef struct {
    unsigned int start, size;
} nvmlGpuInstancePlacement_t;
typedef struct {
    unsigned int id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount, copyEngineCount,
        decoderCount, encoderCount, jpegCount, ofaCount;
    unsigned long long memorySizeMB;
} nvmlGpuInstanceProfileInfo_t;
typedef struct {
    unsigned int version, id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount, copyEngineCount,
        decoderCount, encoderCount, jpegCount, ofaCount;
    unsigned long long memorySizeMB;
    char name[NAME_LEN];
} nvmlGpuInstanceProfileInfo_v2_t;
typedef struct {
    nvmlDevice_t device;
    unsigned int id, profileId;
    nvmlGpuInstancePlacement_t placement;
} nvmlGpuInstanceInfo_t;
typedef struct {
    unsigned int id, sliceCount, instanceCount, multiprocessorCount, sharedCopyEngineCount, sharedDecoderCount,
        sharedEncoderCount, sharedJpegCount, sharedOfaCount;
} nvmlComputeInstanceProfileInfo_t;
typedef struct {
    unsigned int version, id, sliceCount, instanceCount, multiprocessorCount, sharedCopyEngineCount,
        sharedDecoderCount, sharedEncoderCount, sharedJpegCount, sharedOfaCount;
    char name[NAME_LEN];
} nvmlComputeInstanceProfileInfo_v2_t;
typedef struct {
    nvmlDevice_t device;
    nvmlGpuInstance_t gpuInstance;
    unsigned int id, profileId;
    nvmlGpuInstancePlacement_t placement;
} nvmlComputeInstanceInfo_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

/* NVML_COMPUTE_INSTANCE_PROFILE_* constants -> slices (the CI profile id is the constant) */
static const unsigned int ci_slices[8] = {1, 2, 3, 4, 7, 8, 6, 1};

static int valid_gi(nvmlGpuInstance_t gi)
{
    uintptr_t p = (uintptr_t)gi, base = (uintptr_t)mig.gi;
    return p >= base && p < base + sizeof(mig.gi) && (p - base) % sizeof(struct fake_gi) == 0 &&
           gi->magic == GI_MAGIC;
}

static int valid_ci(nvmlComputeInstance_t ci)
{
    unsigned int g, i, k;
    for (g = 0; g < st.gpu_count; g++)
        for (i = 0; i < MAX_GI; i++)
            for (k = 0; k < MAX_CI; k++)
                if (&mig.gi[g][i].ci[k] == ci)
                    return ci->magic == CI_MAGIC && mig.gi[g][i].magic == GI_MAGIC;
    return 0;
}

/* A full GPU with a profile table and MIG enabled (NVML answers profile info only then). */
static nvmlReturn_t mig_gpu(nvmlDevice_t device)
{
    if (device->parent)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!device->has_mig || device->model < 0 || !device->mig_current)
        return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

static int shape_by_id(unsigned int id)
{
    int i;
    for (i = 0; i < 7; i++)
        if (mig_shapes[i].id == id)
            return i;
    return -1;
}

EXPORT nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode, nvmlReturn_t *activation)
{
    unsigned int current, pending;
    CHECK_DEVICE("nvmlDeviceSetMigMode", device);
    if (!activation || device->parent || mode > 1)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!device->has_mig)
        return NVML_ERROR_NOT_SUPPORTED;
    if (!mode && gi_count(device->index))
        return NVML_ERROR_IN_USE; /* GPU instances must be destroyed first */
    current = device->mig_current;
    pending = mode;
    if (device->nproc)
        *activation = NVML_ERROR_IN_USE; /* pending until the processes are gone and the GPU is reset */
    else if (device->has_cc && device->cc_major >= 9 && !device->passthrough)
        *activation = NVML_SUCCESS, current = mode; /* Hopper and later: at once */
    else
        *activation = current == mode ? NVML_SUCCESS : NVML_ERROR_RESET_REQUIRED; /* Ampere: after a reset */
    if (current == device->mig_current && pending == device->mig_pending)
        return NVML_SUCCESS;
    device->mig_current = current;
    device->mig_pending = pending;
    return mig_save() ? NVML_ERROR_UNKNOWN : NVML_SUCCESS;
}

static nvmlReturn_t profile_info(nvmlDevice_t device, unsigned int profile, nvmlGpuInstanceProfileInfo_v2_t *out)
{
    unsigned int s;
    nvmlReturn_t rc = mig_gpu(device);
    if (rc != NVML_SUCCESS)
        return rc;
    if (profile >= 0x12)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (s = 0; s < 7 && mig_shapes[s].constant != profile; s++)
        ;
    if (s == 7)
        return NVML_ERROR_NOT_SUPPORTED;
    memset(out, 0, sizeof(*out));
    out->id = mig_shapes[s].id;
    out->sliceCount = mig_shapes[s].slices;
    out->instanceCount = mig_shapes[s].instances;
    out->multiprocessorCount = mig_shapes[s].slices * device->mig_sm_per_slice;
    out->copyEngineCount = mig_shapes[s].slices;
    media_engines(mig_shapes[s].slices, &out->decoderCount, &out->jpegCount, &out->ofaCount);
    if (s == 1)
        out->decoderCount += 1, out->jpegCount += 1, out->ofaCount += 1;
    out->memorySizeMB = shape_mib(device, s);
    snprintf(out->name, sizeof(out->name), "MIG %s", mig_models[device->model].names[s]);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                        nvmlGpuInstanceProfileInfo_t *info)
{
    nvmlGpuInstanceProfileInfo_v2_t v2;
    nvmlReturn_t rc;
    CHECK_DEVICE("nvmlDeviceGetGpuInstanceProfileInfo", device);
    if (!info)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = profile_info(device, profile, &v2);
    if (rc == NVML_SUCCESS) { /* the same fields, without version and name (memorySizeMB at another offset) */
        memcpy(info, &v2.id, offsetof(nvmlGpuInstanceProfileInfo_t, memorySizeMB));
        info->memorySizeMB = v2.memorySizeMB;
    }
    return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile,
                                                         nvmlGpuInstanceProfileInfo_v2_t *info)
{
    nvmlReturn_t rc;
    CHECK_DEVICE("nvmlDeviceGetGpuInstanceProfileInfoV", device);
    if (!info)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (info->version != PROFILE_INFO_V2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    rc = profile_info(device, profile, info);
    info->version = PROFILE_INFO_V2;
    return rc;
}

static nvmlReturn_t placements(const char *fn, nvmlDevice_t device, unsigned int profile_id,
                               nvmlGpuInstancePlacement_t *out, unsigned int *count)
{
    int s;
    unsigned int i;
    nvmlReturn_t rc;
    CHECK_DEVICE(fn, device);
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    if ((rc = mig_gpu(device)) != NVML_SUCCESS)
        return rc;
    if ((s = shape_by_id(profile_id)) < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!out) {
        *count = mig_shapes[s].count;
        return NVML_SUCCESS;
    }
    if (*count < mig_shapes[s].count) {
        *count = mig_shapes[s].count;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (i = 0; i < mig_shapes[s].count; i++) {
        out[i].start = mig_shapes[s].first + i * mig_shapes[s].step;
        out[i].size = mig_shapes[s].size;
    }
    *count = mig_shapes[s].count;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t device, unsigned int profile_id,
                                                                  nvmlGpuInstancePlacement_t *out,
                                                                  unsigned int *count)
{
    return placements("nvmlDeviceGetGpuInstancePossiblePlacements_v2", device, profile_id, out, count);
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements(nvmlDevice_t device, unsigned int profile_id,
                                                               nvmlGpuInstancePlacement_t *out,
                                                               unsigned int *count)
{
    return placements("nvmlDeviceGetGpuInstancePossiblePlacements", device, profile_id, out, count);
}

static unsigned int profile_count(unsigned int gpu, unsigned int shape)
{
    unsigned int i, n = 0;
    for (i = 0; i < MAX_GI; i++)
        n += mig.gi[gpu][i].magic == GI_MAGIC && mig.gi[gpu][i].shape == shape;
    return n;
}

/* How many more GPU instances of a shape fit (first free placements, one after another). */
static unsigned int remaining(unsigned int gpu, unsigned int shape)
{
    unsigned int used = used_slices(gpu), i, n = 0, left;
    left = mig_shapes[shape].instances - profile_count(gpu, shape);
    for (i = 0; i < mig_shapes[shape].count && n < left; i++) {
        unsigned int mask = ((1u << mig_shapes[shape].size) - 1) << (mig_shapes[shape].first + i * mig_shapes[shape].step);
        if (!(used & mask))
            used |= mask, n++;
    }
    return n;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device, unsigned int profile_id,
                                                              unsigned int *count)
{
    int s;
    nvmlReturn_t rc;
    CHECK_DEVICE("nvmlDeviceGetGpuInstanceRemainingCapacity", device);
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    if ((rc = mig_gpu(device)) != NVML_SUCCESS)
        return rc;
    if ((s = shape_by_id(profile_id)) < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = remaining(device->index, (unsigned int)s);
    return NVML_SUCCESS;
}

static nvmlReturn_t create_gi(const char *fn, nvmlDevice_t device, unsigned int profile_id,
                              const nvmlGpuInstancePlacement_t *placement, nvmlGpuInstance_t *out)
{
    int s;
    unsigned int i, start = 99, used;
    nvmlReturn_t rc;
    struct fake_gi *gi;
    CHECK_DEVICE(fn, device);
    if (!out)
        return NVML_ERROR_INVALID_ARGUMENT;
    if ((rc = mig_gpu(device)) != NVML_SUCCESS)
        return rc;
    if ((s = shape_by_id(profile_id)) < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    used = used_slices(device->index);
    for (i = 0; i < mig_shapes[s].count; i++) {
        unsigned int at = mig_shapes[s].first + i * mig_shapes[s].step;
        unsigned int mask = ((1u << mig_shapes[s].size) - 1) << at;
        if (placement) {
            if (placement->start == at && placement->size == mig_shapes[s].size) {
                start = at;
                if (used & mask)
                    return NVML_ERROR_INSUFFICIENT_RESOURCES;
            }
        } else if (!(used & mask)) {
            start = at;
            break;
        }
    }
    if (placement && start == 99)
        return NVML_ERROR_INVALID_ARGUMENT; /* not one of the possible placements */
    if (start == 99 || profile_count(device->index, (unsigned int)s) >= mig_shapes[s].instances)
        return NVML_ERROR_INSUFFICIENT_RESOURCES;
    if (device->fail_create_after >= 0 && gi_count(device->index) >= (unsigned int)device->fail_create_after)
        return NVML_ERROR_UNKNOWN; /* mig_fail_create_after: a driver error half-way */
    gi = gi_add(device, (unsigned int)s, start, 0);
    if (!gi)
        return NVML_ERROR_INSUFFICIENT_RESOURCES;
    if (mig_save()) {
        gi->magic = 0;
        return NVML_ERROR_UNKNOWN;
    }
    *out = gi;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t device, unsigned int profile_id, nvmlGpuInstance_t *out)
{
    return create_gi("nvmlDeviceCreateGpuInstance", device, profile_id, NULL, out);
}

EXPORT nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t device, unsigned int profile_id,
                                                             const nvmlGpuInstancePlacement_t *placement,
                                                             nvmlGpuInstance_t *out)
{
    if (!placement)
        return NVML_ERROR_INVALID_ARGUMENT;
    return create_gi("nvmlDeviceCreateGpuInstanceWithPlacement", device, profile_id, placement, out);
}

EXPORT nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gi)
{
    unsigned int k;
    CHECK_INIT("nvmlGpuInstanceDestroy");
    if (!valid_gi(gi))
        return NVML_ERROR_INVALID_ARGUMENT;
    for (k = 0; k < MAX_CI; k++)
        if (gi->ci[k].magic == CI_MAGIC)
            return NVML_ERROR_IN_USE;
    gi->magic = 0;
    return mig_save() ? NVML_ERROR_UNKNOWN : NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profile_id, nvmlGpuInstance_t *out,
                                              unsigned int *count)
{
    int s;
    unsigned int i, n = 0;
    nvmlReturn_t rc;
    CHECK_DEVICE("nvmlDeviceGetGpuInstances", device);
    if (!count || !out)
        return NVML_ERROR_INVALID_ARGUMENT;
    if ((rc = mig_gpu(device)) != NVML_SUCCESS)
        return rc;
    if ((s = shape_by_id(profile_id)) < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (i = 0; i < MAX_GI; i++) {
        struct fake_gi *gi = &mig.gi[device->index][i];
        if (gi->magic == GI_MAGIC && gi->shape == (unsigned int)s)
            out[n++] = gi;
    }
    *count = n;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id, nvmlGpuInstance_t *out)
{
    unsigned int i;
    nvmlReturn_t rc;
    CHECK_DEVICE("nvmlDeviceGetGpuInstanceById", device);
    if (!out)
        return NVML_ERROR_INVALID_ARGUMENT;
    if ((rc = mig_gpu(device)) != NVML_SUCCESS)
        return rc;
    for (i = 0; i < MAX_GI; i++)
        if (mig.gi[device->index][i].magic == GI_MAGIC && mig.gi[device->index][i].id == id) {
            *out = &mig.gi[device->index][i];
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gi, nvmlGpuInstanceInfo_t *info)
{
    CHECK_INIT("nvmlGpuInstanceGetInfo");
    if (!valid_gi(gi) || !info)
        return NVML_ERROR_INVALID_ARGUMENT;
    info->device = gi->gpu;
    info->id = gi->id;
    info->profileId = mig_shapes[gi->shape].id;
    info->placement.start = gi->start;
    info->placement.size = gi->size;
    return NVML_SUCCESS;
}

static nvmlReturn_t ci_profile_info(nvmlGpuInstance_t gi, unsigned int profile, unsigned int engine,
                                    nvmlComputeInstanceProfileInfo_v2_t *out)
{
    unsigned int slices, gi_slices;
    if (!valid_gi(gi) || profile >= 9 || engine != 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    slices = ci_slices[profile < 8 ? profile : 0];
    gi_slices = mig_shapes[gi->shape].slices;
    if (profile == 8 || profile == 7 || slices > gi_slices || slices == 6 || slices == 8)
        return NVML_ERROR_NOT_SUPPORTED;
    memset(out, 0, sizeof(*out));
    out->id = profile;
    out->sliceCount = slices;
    out->instanceCount = gi_slices / slices;
    out->multiprocessorCount = slices * gi->gpu->mig_sm_per_slice;
    out->sharedCopyEngineCount = gi_slices;
    media_engines(gi_slices, &out->sharedDecoderCount, &out->sharedJpegCount, &out->sharedOfaCount);
    snprintf(out->name, sizeof(out->name), "MIG %uc.%s", slices, mig_models[gi->gpu->model].names[gi->shape]);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gi, unsigned int profile,
                                                                 unsigned int engine,
                                                                 nvmlComputeInstanceProfileInfo_t *info)
{
    nvmlComputeInstanceProfileInfo_v2_t v2;
    nvmlReturn_t rc;
    CHECK_INIT("nvmlGpuInstanceGetComputeInstanceProfileInfo");
    if (!info)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = ci_profile_info(gi, profile, engine, &v2);
    if (rc == NVML_SUCCESS)
        memcpy(info, &v2.id, sizeof(*info));
    return rc;
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t gi, unsigned int profile,
                                                                  unsigned int engine,
                                                                  nvmlComputeInstanceProfileInfo_v2_t *info)
{
    nvmlReturn_t rc;
    CHECK_INIT("nvmlGpuInstanceGetComputeInstanceProfileInfoV");
    if (!info)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (info->version != CI_PROFILE_INFO_V2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    rc = ci_profile_info(gi, profile, engine, info);
    info->version = CI_PROFILE_INFO_V2;
    return rc;
}

static unsigned int ci_used(nvmlGpuInstance_t gi)
{
    unsigned int k, n = 0;
    for (k = 0; k < MAX_CI; k++)
        if (gi->ci[k].magic == CI_MAGIC)
            n += gi->ci[k].slices;
    return n;
}

EXPORT nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gi, unsigned int profile,
                                                         nvmlComputeInstance_t *out)
{
    nvmlComputeInstanceProfileInfo_v2_t info;
    nvmlReturn_t rc;
    struct fake_ci *ci;
    CHECK_INIT("nvmlGpuInstanceCreateComputeInstance");
    if (!out)
        return NVML_ERROR_INVALID_ARGUMENT;
    if ((rc = ci_profile_info(gi, profile, 0, &info)) != NVML_SUCCESS)
        return rc;
    if (ci_used(gi) + info.sliceCount > mig_shapes[gi->shape].slices)
        return NVML_ERROR_INSUFFICIENT_RESOURCES;
    if (!(ci = ci_add(gi, info.sliceCount, -1)))
        return NVML_ERROR_INSUFFICIENT_RESOURCES;
    if (mig_save()) {
        ci->magic = 0;
        return NVML_ERROR_UNKNOWN;
    }
    *out = ci;
    return NVML_SUCCESS;
}

static unsigned int ci_profile_of(unsigned int slices)
{
    unsigned int p;
    for (p = 0; p < 7 && ci_slices[p] != slices; p++)
        ;
    return p;
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gi, unsigned int profile,
                                                       nvmlComputeInstance_t *out, unsigned int *count)
{
    unsigned int k, n = 0;
    CHECK_INIT("nvmlGpuInstanceGetComputeInstances");
    if (!valid_gi(gi) || !out || !count || profile >= 9)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (k = 0; k < MAX_CI; k++)
        if (gi->ci[k].magic == CI_MAGIC && ci_profile_of(gi->ci[k].slices) == profile)
            out[n++] = &gi->ci[k];
    *count = n;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gi, unsigned int id,
                                                          nvmlComputeInstance_t *out)
{
    unsigned int k;
    CHECK_INIT("nvmlGpuInstanceGetComputeInstanceById");
    if (!valid_gi(gi) || !out)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (k = 0; k < MAX_CI; k++)
        if (gi->ci[k].magic == CI_MAGIC && gi->ci[k].id == id) {
            *out = &gi->ci[k];
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}

EXPORT nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t ci)
{
    CHECK_INIT("nvmlComputeInstanceDestroy");
    if (!valid_ci(ci))
        return NVML_ERROR_INVALID_ARGUMENT;
    ci->magic = 0;
    return mig_save() ? NVML_ERROR_UNKNOWN : NVML_SUCCESS;
}

static nvmlReturn_t ci_info(nvmlComputeInstance_t ci, nvmlComputeInstanceInfo_t *info)
{
    if (!valid_ci(ci) || !info)
        return NVML_ERROR_INVALID_ARGUMENT;
    info->device = ci->gi->gpu;
    info->gpuInstance = ci->gi;
    info->id = ci->id;
    info->profileId = ci_profile_of(ci->slices);
    info->placement.start = 0;
    info->placement.size = ci->slices;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t ci, nvmlComputeInstanceInfo_t *info)
{
    CHECK_INIT("nvmlComputeInstanceGetInfo_v2");
    return ci_info(ci, info);
}

EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t ci, nvmlComputeInstanceInfo_t *info)
{
    CHECK_INIT("nvmlComputeInstanceGetInfo");
    return ci_info(ci, info);
}

/* The profile's simulated processes (processes = pid:name, ...), on the whole GPU. */
static nvmlReturn_t running_processes(const char *fn, nvmlDevice_t device, unsigned int *count,
                                      nvmlProcessInfo_t *infos)
{
    unsigned int i;
    CHECK_DEVICE(fn, device);
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (*count < device->nproc || (!infos && device->nproc)) {
        *count = device->nproc;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (i = 0; i < device->nproc; i++) {
        infos[i].pid = device->pids[i];
        infos[i].usedGpuMemory = 512ULL * MIB;
        infos[i].gpuInstanceId = 0xFFFFFFFFu;
        infos[i].computeInstanceId = 0xFFFFFFFFu;
    }
    *count = device->nproc;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
                                                            nvmlProcessInfo_t *infos)
{
    return running_processes("nvmlDeviceGetComputeRunningProcesses_v3", device, count, infos);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *count,
                                                            nvmlProcessInfo_t *infos)
{
    return running_processes("nvmlDeviceGetComputeRunningProcesses_v2", device, count, infos);
}

EXPORT nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length)
{
    unsigned int g, i;
    CHECK_INIT("nvmlSystemGetProcessName");
    for (g = 0; g < st.gpu_count; g++)
        for (i = 0; i < st.gpus[g].nproc; i++)
            if (st.gpus[g].pids[i] == pid)
                return copy_string(name, length, st.gpus[g].pnames[i]);
    return NVML_ERROR_NOT_FOUND;
}
#endif

/* ------------------------------------------------------------------ */
/* Health signals                                                     */

/* Common checks of a health query: a full GPU that is neither lost nor waiting for a reset, and a
 * function the profile does not mark unsupported for it. */
static nvmlReturn_t health_query(const char *fn, nvmlDevice_t device)
{
    int i;
    CHECK_DEVICE(fn, device);
    if (device->parent)
        return NVML_ERROR_NOT_SUPPORTED;
    if (device->state == STATE_LOST)
        return NVML_ERROR_GPU_IS_LOST;
    if (device->state == STATE_RESET_REQUIRED)
        return NVML_ERROR_RESET_REQUIRED;
    i = known_index(fn);
    if (i >= 0 && device->not_supported[i])
        return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

#define HEALTH_QUERY(fn, device)                                                                                     \
    do {                                                                                                             \
        nvmlReturn_t rc_ = health_query(fn, device);                                                                 \
        if (rc_ != NVML_SUCCESS)                                                                                     \
            return rc_;                                                                                              \
    } while (0)

/* Row remapping exists from Ampere (compute capability 8.0) on; page retirement before it. */
static int remaps_rows(nvmlDevice_t device)
{
    return device->has_cc && device->cc_major >= 8;
}

EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int error_type, int counter_type,
                                                unsigned long long *count)
{
    static const int index[2][2] = {{H_ECC_VOL_COR, H_ECC_AGG_COR}, {H_ECC_VOL_UNC, H_ECC_AGG_UNC}};
    HEALTH_QUERY("nvmlDeviceGetTotalEccErrors", device);
    if (!count || error_type < 0 || error_type > 1 || counter_type < 0 || counter_type > 1)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = device->health[index[error_type][counter_type]];
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrected, unsigned int *uncorrected,
                                              unsigned int *pending, unsigned int *failure)
{
    HEALTH_QUERY("nvmlDeviceGetRemappedRows", device);
    if (!corrected || !uncorrected || !pending || !failure)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!remaps_rows(device) || (device->mig_current && device->mig_count))
        return NVML_ERROR_NOT_SUPPORTED;
    *corrected = (unsigned int)device->health[H_REMAP_COR];
    *uncorrected = (unsigned int)device->health[H_REMAP_UNC];
    *pending = (unsigned int)device->health[H_REMAP_PENDING];
    *failure = (unsigned int)device->health[H_REMAP_FAILURE];
    return NVML_SUCCESS;
}

static nvmlReturn_t retired_pages(const char *fn, nvmlDevice_t device, int cause, unsigned int *count,
                                  unsigned long long *addresses, unsigned long long *timestamps)
{
    unsigned int n, i;
    HEALTH_QUERY(fn, device);
    if (!count || cause < 0 || cause > 1)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (remaps_rows(device))
        return NVML_ERROR_NOT_SUPPORTED;
    n = (unsigned int)device->health[cause == 0 ? H_RETIRED_SBE : H_RETIRED_DBE];
    if (n && (*count < n || !addresses)) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (i = 0; i < n; i++) {
        addresses[i] = ((unsigned long long)(cause + 1) << 32) | ((unsigned long long)(i + 1) << 12);
        if (timestamps)
            timestamps[i] = 1700000000ULL + i;
    }
    *count = n;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device, int cause, unsigned int *count,
                                              unsigned long long *addresses)
{
    return retired_pages("nvmlDeviceGetRetiredPages", device, cause, count, addresses, NULL);
}

EXPORT nvmlReturn_t nvmlDeviceGetRetiredPages_v2(nvmlDevice_t device, int cause, unsigned int *count,
                                                 unsigned long long *addresses, unsigned long long *timestamps)
{
    return retired_pages("nvmlDeviceGetRetiredPages_v2", device, cause, count, addresses, timestamps);
}

EXPORT nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, int *pending)
{
    HEALTH_QUERY("nvmlDeviceGetRetiredPagesPendingStatus", device);
    if (!pending)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (remaps_rows(device))
        return NVML_ERROR_NOT_SUPPORTED;
    *pending = (int)device->health[H_RETIRED_PENDING];
    return NVML_SUCCESS;
}

static nvmlReturn_t clocks_reasons(const char *fn, nvmlDevice_t device, unsigned long long *reasons)
{
    HEALTH_QUERY(fn, device);
    if (!reasons)
        return NVML_ERROR_INVALID_ARGUMENT;
    *reasons = device->clocks_event_reasons;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *reasons)
{
    return clocks_reasons("nvmlDeviceGetCurrentClocksEventReasons", device, reasons);
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long *reasons)
{
    return clocks_reasons("nvmlDeviceGetCurrentClocksThrottleReasons", device, reasons);
}

static nvmlReturn_t health_uint(const char *fn, nvmlDevice_t device, enum health_value which, unsigned int *out)
{
    HEALTH_QUERY(fn, device);
    if (!out)
        return NVML_ERROR_INVALID_ARGUMENT;
    *out = (unsigned int)device->health[which];
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned int *gen)
{
    return health_uint("nvmlDeviceGetCurrPcieLinkGeneration", device, H_PCIE_GEN, gen);
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *gen)
{
    return health_uint("nvmlDeviceGetMaxPcieLinkGeneration", device, H_PCIE_GEN_MAX, gen);
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned int *width)
{
    return health_uint("nvmlDeviceGetCurrPcieLinkWidth", device, H_PCIE_WIDTH, width);
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t device, unsigned int *width)
{
    return health_uint("nvmlDeviceGetMaxPcieLinkWidth", device, H_PCIE_WIDTH_MAX, width);
}

EXPORT nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device, unsigned int *value)
{
    return health_uint("nvmlDeviceGetPcieReplayCounter", device, H_PCIE_REPLAYS, value);
}

/* sensor 0: NVML_TEMPERATURE_GPU, the only sensor NVML has */
EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned int *temp)
{
    if (sensor != 0)
        return st.init_count <= 0 ? NVML_ERROR_UNINITIALIZED : NVML_ERROR_INVALID_ARGUMENT;
    return health_uint("nvmlDeviceGetTemperature", device, H_TEMPERATURE, temp);
}

/* thresholds: 0 SHUTDOWN (slowdown + 5), 1 SLOWDOWN; the memory and GPU maximum ones are not supported */
EXPORT nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t device, int threshold, unsigned int *temp)
{
    HEALTH_QUERY("nvmlDeviceGetTemperatureThreshold", device);
    if (!temp || threshold < 0 || threshold > 7)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (threshold > 1)
        return NVML_ERROR_NOT_SUPPORTED;
    *temp = (unsigned int)device->health[H_TEMPERATURE_SLOWDOWN] + (threshold == 0 ? 5 : 0);
    return NVML_SUCCESS;
}

static void fabric_uuid(nvmlDevice_t device, unsigned char *uuid)
{
    unsigned int i;
    for (i = 0; i < FABRIC_UUID_LEN; i++)
        uuid[i] = (unsigned char)(0xf0 + i);
    (void)device;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *info)
{
    HEALTH_QUERY("nvmlDeviceGetGpuFabricInfo", device);
    if (!info)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (device->fabric_state < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    memset(info, 0, sizeof(*info));
    fabric_uuid(device, info->clusterUuid);
    info->status = NVML_SUCCESS;
    info->cliqueId = 1;
    info->state = (unsigned int)device->fabric_state;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfoV_t *info)
{
    HEALTH_QUERY("nvmlDeviceGetGpuFabricInfoV", device);
    if (!info)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (info->version != NVML_GPU_FABRIC_INFO_V2 && info->version != NVML_GPU_FABRIC_INFO_V3)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (device->fabric_state < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    fabric_uuid(device, info->clusterUuid);
    info->status = NVML_SUCCESS;
    info->cliqueId = 1;
    info->state = (unsigned int)device->fabric_state;
    info->healthMask = device->fabric_health_mask;
    if (info->version == NVML_GPU_FABRIC_INFO_V3)
        info->healthSummary = (unsigned char)device->fabric_health;
    return NVML_SUCCESS;
}

/* Only NVML_FI_DEV_GET_GPU_RECOVERY_ACTION is known; every other field answers NOT_SUPPORTED in its entry. */
EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int count, nvmlFieldValue_t *values)
{
    int i;
    HEALTH_QUERY("nvmlDeviceGetFieldValues", device);
    if (count < 0 || (count && !values))
        return NVML_ERROR_INVALID_ARGUMENT;
    for (i = 0; i < count; i++) {
        nvmlFieldValue_t *v = &values[i];
        v->timestamp = 1700000000000000LL;
        v->latencyUsec = 0;
        memset(&v->value, 0, sizeof(v->value));
        if (v->fieldId == NVML_FI_DEV_GET_GPU_RECOVERY_ACTION && device->recovery_action >= 0) {
            v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
            v->value.uiVal = (unsigned int)device->recovery_action;
            v->nvmlReturn = NVML_SUCCESS;
        } else {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    return NVML_SUCCESS;
}
