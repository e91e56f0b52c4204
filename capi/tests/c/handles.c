/* handles REGISTRY TRUST_ROOT STATE_FILE: every handle and string of the C API used and
 * freed, for a run under AddressSanitizer (leaks, use after free, overflows). Verifies a
 * good registry several times (saving the rollback state to STATE_FILE), reads every
 * string of every module, frees each report; then a failing verification, whose error
 * strings are read; then policies with every setter, and runtimes opened with them (on a
 * host without a driver the open fails with CUDA_AOT_STATUS_DRIVER after verifying; with a
 * GPU it succeeds, preloads and is freed). Exits 0 when everything held. Built with -DLEAK_ONE_REPORT it
 * forgets one cuda_aot_report_free, which the sanitizer must report. */
#include <stdio.h>
#include <string.h>

#include "cuda_aot.h"

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s REGISTRY TRUST_ROOT STATE_FILE\n", argv[0]);
        return 2;
    }
    size_t total = 0;
    for (int round = 0; round < 3; round++) {
        cuda_aot_report *report = NULL;
        cuda_aot_status s =
            cuda_aot_verify(argv[1], argv[2], argv[3], CUDA_AOT_VERIFY_SAVE_STATE, &report);
        if (s != CUDA_AOT_STATUS_OK || report == NULL) {
            fprintf(stderr, "verify: %s\nFix: %s\n", cuda_aot_last_error_message(),
                    cuda_aot_last_error_fix());
            return 1;
        }
        total += strlen(cuda_aot_report_summary(report));
        size_t n = cuda_aot_report_module_count(report);
        for (size_t i = 0; i < n; i++) {
            cuda_aot_module_info m;
            if (cuda_aot_report_module(report, i, &m) != CUDA_AOT_STATUS_OK) return 1;
            total += strlen(m.module) + strlen(m.target) + strlen(m.kind) + strlen(m.digest);
        }
        cuda_aot_module_info past;
        if (cuda_aot_report_module(report, n, &past) != CUDA_AOT_STATUS_INVALID_ARGUMENT) return 1;
        total += strlen(cuda_aot_last_error_message()) + strlen(cuda_aot_last_error_fix());
        if (cuda_aot_report_index_version(report) == 0) return 1;
#ifdef LEAK_ONE_REPORT /* the sanitizer test's proof that a missing free is caught */
        if (round == 0) continue;
#endif
        cuda_aot_report_free(report);
    }
    cuda_aot_report *none = NULL;
    cuda_aot_status s = cuda_aot_verify(argv[1], "/nonexistent/root.json", argv[3], 0, &none);
    if (s == CUDA_AOT_STATUS_OK || none != NULL) return 1;
    total += strlen(cuda_aot_last_error_message()) + strlen(cuda_aot_last_error_fix());
    for (int round = 0; round < 2; round++) {
        cuda_aot_policy *policy = NULL;
        if (cuda_aot_policy_new(CUDA_AOT_POLICY_PRESET_DEVELOPMENT, &policy) != CUDA_AOT_STATUS_OK ||
            cuda_aot_policy_allow_ptx(policy) != CUDA_AOT_STATUS_OK ||
            cuda_aot_policy_state_file(policy, argv[3]) != CUDA_AOT_STATUS_OK ||
            cuda_aot_policy_offline_grace(policy, 3600) != CUDA_AOT_STATUS_OK ||
            cuda_aot_policy_device(policy, 0) != CUDA_AOT_STATUS_OK ||
            cuda_aot_policy_load_api(policy, round ? CUDA_AOT_LOAD_API_LIBRARY : CUDA_AOT_LOAD_API_MODULE) !=
                CUDA_AOT_STATUS_OK)
            return 1;
        cuda_aot_runtime *rt = NULL;
        s = cuda_aot_runtime_open(argv[1], argv[2], policy, &rt);
        cuda_aot_policy_free(policy);
        total += strlen(cuda_aot_last_error_message()) + strlen(cuda_aot_last_error_fix());
        if (s == CUDA_AOT_STATUS_OK) {
            if (cuda_aot_runtime_preload(rt) != CUDA_AOT_STATUS_OK) return 1;
            cuda_aot_device_info d;
            if (cuda_aot_runtime_device(rt, &d) != CUDA_AOT_STATUS_OK) return 1;
            total += strlen(d.name) + strlen(d.sm) + strlen(d.uuid);
            cuda_aot_runtime_free(rt);
        } else if (s != CUDA_AOT_STATUS_DRIVER || rt != NULL) {
            fprintf(stderr, "open: %s: %s\n", cuda_aot_status_name(s), cuda_aot_last_error_message());
            return 1;
        }
    }
    printf("handles ok (%zu bytes of strings read)\n", total);
    return 0;
}
