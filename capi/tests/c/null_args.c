/* Misuse of the C API that must be refused with CUDA_AOT_STATUS_INVALID_ARGUMENT and a
 * message and Fix, never a crash: NULL pointers and handles, a string that is not UTF-8, an
 * unknown flag, preset or load API, a count of 0, an index out of range. Prints one line per check; exits 0 when all hold. */
#include <stdio.h>
#include <string.h>

#include "cuda_aot.h"

static int failures = 0;

static void expect(const char *what, cuda_aot_status got, cuda_aot_status want) {
    const char *msg = cuda_aot_last_error_message();
    const char *fix = cuda_aot_last_error_fix();
    int ok = got == want && cuda_aot_last_error_status() == want &&
             (want == CUDA_AOT_STATUS_OK || (strlen(msg) > 0 && strlen(fix) > 0));
    printf("%s %s: %s (%s) Fix: %s\n", ok ? "ok" : "FAILED", what, cuda_aot_status_name(got),
           msg, fix);
    failures += !ok;
}

int main(void) {
    cuda_aot_report *report = (cuda_aot_report *)&failures; /* must be set to NULL */
    expect("registry NULL", cuda_aot_verify(NULL, "root.json", NULL, 0, &report),
           CUDA_AOT_STATUS_INVALID_ARGUMENT);
    if (report != NULL) {
        printf("FAILED out not set to NULL on failure\n");
        failures++;
    }
    expect("trust_root NULL", cuda_aot_verify("registry", NULL, NULL, 0, &report),
           CUDA_AOT_STATUS_INVALID_ARGUMENT);
    expect("out NULL", cuda_aot_verify("registry", "root.json", NULL, 0, NULL),
           CUDA_AOT_STATUS_INVALID_ARGUMENT);
    expect("registry not UTF-8", cuda_aot_verify("reg\xff", "root.json", NULL, 0, &report),
           CUDA_AOT_STATUS_INVALID_ARGUMENT);
    expect("registry empty", cuda_aot_verify("", "root.json", NULL, 0, &report),
           CUDA_AOT_STATUS_INVALID_ARGUMENT);
    expect("unknown flag", cuda_aot_verify("registry", "root.json", NULL, 0x80, &report),
           CUDA_AOT_STATUS_INVALID_ARGUMENT);
    cuda_aot_module_info info;
    expect("report NULL", cuda_aot_report_module(NULL, 0, &info),
           CUDA_AOT_STATUS_INVALID_ARGUMENT);
    /* Functions without a status accept NULL and leave the last error alone. */
    if (cuda_aot_report_module_count(NULL) != 0 || cuda_aot_report_index_version(NULL) != 0 ||
        strcmp(cuda_aot_report_summary(NULL), "") != 0) {
        printf("FAILED NULL report accessors\n");
        failures++;
    }
    cuda_aot_report_free(NULL);

    /* Policies, runtimes, kernels and globals: NULL handles and outputs, unknown presets. */
    cuda_aot_policy *policy = (cuda_aot_policy *)&failures;
    expect("policy preset unknown", cuda_aot_policy_new(7, &policy),
           CUDA_AOT_STATUS_INVALID_ARGUMENT);
    if (policy != NULL) {
        printf("FAILED policy out not set to NULL on failure\n");
        failures++;
    }
    expect("policy out NULL", cuda_aot_policy_new(CUDA_AOT_POLICY_PRESET_PRODUCTION, NULL),
           CUDA_AOT_STATUS_INVALID_ARGUMENT);
    expect("policy NULL (allow_ptx)", cuda_aot_policy_allow_ptx(NULL),
           CUDA_AOT_STATUS_INVALID_ARGUMENT);
    expect("policy new", cuda_aot_policy_new(CUDA_AOT_POLICY_PRESET_PRODUCTION, &policy),
           CUDA_AOT_STATUS_OK);
    expect("state file NULL", cuda_aot_policy_state_file(policy, NULL),
           CUDA_AOT_STATUS_INVALID_ARGUMENT);
    expect("state file empty", cuda_aot_policy_state_file(policy, ""),
           CUDA_AOT_STATUS_INVALID_ARGUMENT);
    expect("load api unknown", cuda_aot_policy_load_api(policy, 9),
           CUDA_AOT_STATUS_INVALID_ARGUMENT);
    expect("load api library", cuda_aot_policy_load_api(policy, CUDA_AOT_LOAD_API_LIBRARY),
           CUDA_AOT_STATUS_OK);
    cuda_aot_runtime *rt = (cuda_aot_runtime *)&failures;
    expect("runtime registry NULL", cuda_aot_runtime_open(NULL, "root.json", policy, &rt),
           CUDA_AOT_STATUS_INVALID_ARGUMENT);
    if (rt != NULL) {
        printf("FAILED runtime out not set to NULL on failure\n");
        failures++;
    }
    expect("runtime out NULL", cuda_aot_runtime_open("registry", "root.json", policy, NULL),
           CUDA_AOT_STATUS_INVALID_ARGUMENT);
    size_t devices[1] = {0};
    cuda_aot_runtime *rts[1];
    expect("open_devices count 0",
           cuda_aot_runtime_open_devices("registry", "root.json", policy, devices, 0, rts),
           CUDA_AOT_STATUS_INVALID_ARGUMENT);
    expect("open_devices devices NULL",
           cuda_aot_runtime_open_devices("registry", "root.json", policy, NULL, 1, rts),
           CUDA_AOT_STATUS_INVALID_ARGUMENT);
    cuda_aot_policy_free(policy);
    expect("preload NULL", cuda_aot_runtime_preload(NULL), CUDA_AOT_STATUS_INVALID_ARGUMENT);
    cuda_aot_counters counters;
    expect("counters NULL", cuda_aot_runtime_counters(NULL, &counters),
           CUDA_AOT_STATUS_INVALID_ARGUMENT);
    cuda_aot_kernel *kernel = (cuda_aot_kernel *)&failures;
    expect("kernel runtime NULL", cuda_aot_runtime_kernel(NULL, "field_ops", "gl_add", &kernel),
           CUDA_AOT_STATUS_INVALID_ARGUMENT);
    if (kernel != NULL) {
        printf("FAILED kernel out not set to NULL on failure\n");
        failures++;
    }
    cuda_aot_global *global = NULL;
    expect("global runtime NULL", cuda_aot_runtime_global(NULL, "m", "g", &global),
           CUDA_AOT_STATUS_INVALID_ARGUMENT);
    cuda_aot_dim3 one = {1, 1, 1};
    expect("launch kernel NULL", cuda_aot_kernel_launch(NULL, one, one, 0, NULL, NULL, NULL, 0),
           CUDA_AOT_STATUS_INVALID_ARGUMENT);
    cuda_aot_param param;
    expect("param kernel NULL", cuda_aot_kernel_param(NULL, 0, &param),
           CUDA_AOT_STATUS_INVALID_ARGUMENT);
    unsigned long long table[8] = {0};
    expect("global write NULL", cuda_aot_global_write(NULL, table, sizeof table),
           CUDA_AOT_STATUS_INVALID_ARGUMENT);
    expect("global read NULL", cuda_aot_global_read(NULL, table, sizeof table),
           CUDA_AOT_STATUS_INVALID_ARGUMENT);
    if (cuda_aot_runtime_module_count(NULL) != 0 || cuda_aot_runtime_index_version(NULL) != 0 ||
        cuda_aot_runtime_context(NULL) != NULL || cuda_aot_kernel_function(NULL) != NULL ||
        cuda_aot_kernel_cu_kernel(NULL) != NULL || cuda_aot_kernel_param_count(NULL) != 0 ||
        cuda_aot_kernel_max_threads(NULL) != 0 || strcmp(cuda_aot_kernel_name(NULL), "") != 0 ||
        strcmp(cuda_aot_kernel_symbol(NULL), "") != 0 || cuda_aot_global_size(NULL) != 0 ||
        cuda_aot_global_device_ptr(NULL) != 0 || strcmp(cuda_aot_global_name(NULL), "") != 0) {
        printf("FAILED NULL runtime, kernel or global accessors\n");
        failures++;
    }
    cuda_aot_runtime_free(NULL);
    cuda_aot_kernel_free(NULL);
    cuda_aot_global_free(NULL);
    cuda_aot_policy_free(NULL);

    if (strcmp(cuda_aot_status_name(12345), "CUDA_AOT_STATUS_UNKNOWN") != 0 ||
        strcmp(cuda_aot_status_name(CUDA_AOT_STATUS_TAMPERED), "CUDA_AOT_STATUS_TAMPERED") != 0 ||
        strlen(cuda_aot_version()) == 0) {
        printf("FAILED status names or version\n");
        failures++;
    }
    printf("%d failure(s)\n", failures);
    return failures != 0;
}
