/* Misuse of the C API that must be refused with CUDA_AOT_STATUS_INVALID_ARGUMENT and a
 * message and Fix, never a crash: NULL pointers, a string that is not UTF-8, an unknown
 * flag, an index out of range. Prints one line per check; exits 0 when all hold. */
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
    if (strcmp(cuda_aot_status_name(12345), "CUDA_AOT_STATUS_UNKNOWN") != 0 ||
        strcmp(cuda_aot_status_name(CUDA_AOT_STATUS_TAMPERED), "CUDA_AOT_STATUS_TAMPERED") != 0 ||
        strlen(cuda_aot_version()) == 0) {
        printf("FAILED status names or version\n");
        failures++;
    }
    printf("%d failure(s)\n", failures);
    return failures != 0;
}
