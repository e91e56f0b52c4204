/* open REGISTRY TRUST_ROOT [production]: opens the registry for device 0 through the C ABI
 * (verification, selection for the device, driver checks) and preloads it; prints the
 * status name, the message and the Fix on one line each, and exits with the status number
 * (0 when the runtime opened, which needs a GPU). */
#include <stdio.h>
#include <string.h>

#include "cuda_aot.h"

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s REGISTRY TRUST_ROOT [production]\n", argv[0]);
        return 100;
    }
    int production = argc > 3 && strcmp(argv[3], "production") == 0;
    cuda_aot_policy *policy = NULL;
    cuda_aot_status s = cuda_aot_policy_new(
        production ? CUDA_AOT_POLICY_PRESET_PRODUCTION : CUDA_AOT_POLICY_PRESET_DEVELOPMENT,
        &policy);
    if (s != CUDA_AOT_STATUS_OK) return 101;
    cuda_aot_runtime *rt = NULL;
    s = cuda_aot_runtime_open(argv[1], argv[2], policy, &rt);
    cuda_aot_policy_free(policy);
    if (s == CUDA_AOT_STATUS_OK) {
        s = cuda_aot_runtime_preload(rt);
    }
    printf("status %s\nerror %s\nFix: %s\n", cuda_aot_status_name(s),
           cuda_aot_last_error_message(), cuda_aot_last_error_fix());
    if (s != CUDA_AOT_STATUS_OK && rt != NULL) {
        printf("runtime set on failure\n");
        return 102;
    }
    cuda_aot_runtime_free(rt);
    return (int)s;
}
