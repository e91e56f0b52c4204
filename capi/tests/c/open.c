/* open REGISTRY TRUST_ROOT [production|embedded]: opens the registry for device 0 through
 * the C ABI (verification, selection for the device, driver checks) and preloads it; prints
 * the status name, the message and the Fix on one line each, and exits with the status
 * number (0 when the runtime opened, which needs a GPU). With `embedded`, REGISTRY is a
 * bundle file, read into a 64-byte aligned buffer that lives until exit (as an embedded
 * array would) and opened with cuda_aot_runtime_open_embedded, the trust root by its bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_aot.h"

/* The whole file `path` in a buffer aligned to 64 bytes (never freed), its size in *len. */
static unsigned char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = aligned_alloc(64, ((size_t)n + 64) / 64 * 64);
    *len = buf != NULL ? fread(buf, 1, (size_t)n, f) : 0;
    fclose(f);
    return buf;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s REGISTRY TRUST_ROOT [production]\n", argv[0]);
        return 100;
    }
    int production = argc > 3 && strcmp(argv[3], "production") == 0;
    int embedded = argc > 3 && strcmp(argv[3], "embedded") == 0;
    cuda_aot_policy *policy = NULL;
    cuda_aot_status s = cuda_aot_policy_new(
        production ? CUDA_AOT_POLICY_PRESET_PRODUCTION : CUDA_AOT_POLICY_PRESET_DEVELOPMENT,
        &policy);
    if (s != CUDA_AOT_STATUS_OK) return 101;
    cuda_aot_runtime *rt = NULL;
    if (embedded) {
        size_t bundle_len = 0, trust_len = 0;
        unsigned char *bundle = slurp(argv[1], &bundle_len);
        unsigned char *trust = slurp(argv[2], &trust_len);
        if (bundle == NULL || trust == NULL) return 103;
        s = cuda_aot_runtime_open_embedded(bundle, bundle_len, trust, trust_len, policy, &rt);
        free(trust);
    } else {
        s = cuda_aot_runtime_open(argv[1], argv[2], policy, &rt);
    }
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
