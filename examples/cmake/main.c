/* verify_registry REGISTRY TRUST_ROOT: the CMake example's program. It verifies a cuda-aot
 * registry offline through the installed C library and prints `verified` with what was
 * verified, or the error and its Fix: line (exit 1). See CMakeLists.txt beside it. */
#include <stdio.h>

#include <cuda_aot.h>

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
    printf("verified (cuda-aot %s): %s\n", cuda_aot_version(), cuda_aot_report_summary(report));
    cuda_aot_report_free(report);
    return 0;
}
