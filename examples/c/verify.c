/* verify REGISTRY TRUST_ROOT: verifies a cuda-aot registry offline through the C ABI
 * (libcuda_aot_capi, header cuda_aot.h), as `cargo xtask verify` does.
 * Prints one line per module and target and exits 0, or prints the error and its Fix:
 * line and exits 1 (2 for a usage error). The rollback state is read from its default
 * place (CUDA_AOT_STATE_DIR, XDG_STATE_HOME or ~/.local/state) and never written.
 *
 * Build (docs/capi.md):
 *   cargo xtask install-capi --prefix .cuda-aot/capi
 *   cc examples/c/verify.c -I.cuda-aot/capi/include -L.cuda-aot/capi/lib -lcuda_aot_capi \
 *      -Wl,-rpath,"$PWD/.cuda-aot/capi/lib" -o verify
 */
#include <stdio.h>

#include "cuda_aot.h"

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s REGISTRY TRUST_ROOT\n", argv[0]);
        return 2;
    }
    cuda_aot_report *report = NULL;
    cuda_aot_status status = cuda_aot_verify(argv[1], argv[2], NULL, 0, &report);
    if (status != CUDA_AOT_STATUS_OK) {
        fprintf(stderr, "error: %s (%s)\nFix: %s\n", cuda_aot_last_error_message(),
                cuda_aot_status_name(status), cuda_aot_last_error_fix());
        return 1;
    }
    printf("%s\n", cuda_aot_report_summary(report));
    size_t n = cuda_aot_report_module_count(report);
    for (size_t i = 0; i < n; i++) {
        cuda_aot_module_info m;
        if (cuda_aot_report_module(report, i, &m) != CUDA_AOT_STATUS_OK) {
            fprintf(stderr, "error: %s\nFix: %s\n", cuda_aot_last_error_message(),
                    cuda_aot_last_error_fix());
            cuda_aot_report_free(report);
            return 1;
        }
        printf("%-12s %-11s %-6s %9llu  %s\n", m.module, m.target, m.kind,
               (unsigned long long)m.size, m.digest);
    }
    cuda_aot_report_free(report);
    return 0;
}
