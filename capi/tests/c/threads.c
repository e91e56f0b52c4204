/* threads REGISTRY TRUST_ROOT: eight threads at once, each verifying the registry and
 * reading its report, then making a failing call, so each thread's last error must be its
 * own: a thread whose call succeeded sees "" while another thread's call failed. Prints
 * "threads ok" and exits 0 when every thread saw exactly its own results. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cuda_aot.h"

#define THREADS 8
#define ROUNDS 20

static const char *registry, *trust;

static void *work(void *arg) {
    long id = (long)arg;
    for (int round = 0; round < ROUNDS; round++) {
        cuda_aot_report *report = NULL;
        if (cuda_aot_verify(registry, trust, "/nonexistent-state/state.json", 0, &report) !=
                CUDA_AOT_STATUS_OK ||
            strcmp(cuda_aot_last_error_message(), "") != 0 ||
            cuda_aot_report_module_count(report) == 0) {
            fprintf(stderr, "thread %ld: verify: %s\n", id, cuda_aot_last_error_message());
            return (void *)1;
        }
        cuda_aot_report_free(report);
        /* Odd threads fail a call; even ones succeed: the last errors must not mix. */
        cuda_aot_status s = (id % 2)
                                ? cuda_aot_verify(registry, "/nonexistent/root.json", NULL, 0, &report)
                                : cuda_aot_verify(registry, trust, "/nonexistent-state/state.json", 0,
                                                  &report);
        if ((id % 2) && (s != CUDA_AOT_STATUS_NOT_FOUND || strstr(cuda_aot_last_error_message(), "root.json") == NULL)) {
            fprintf(stderr, "thread %ld: %s: %s\n", id, cuda_aot_status_name(s), cuda_aot_last_error_message());
            return (void *)2;
        }
        if (!(id % 2)) {
            if (s != CUDA_AOT_STATUS_OK || strcmp(cuda_aot_last_error_message(), "") != 0) return (void *)3;
            cuda_aot_report_free(report);
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s REGISTRY TRUST_ROOT\n", argv[0]);
        return 2;
    }
    registry = argv[1];
    trust = argv[2];
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, work, (void *)i);
    int failed = 0;
    for (int i = 0; i < THREADS; i++) {
        void *r;
        pthread_join(t[i], &r);
        if (r != NULL) {
            fprintf(stderr, "thread %d failed (%ld)\n", i, (long)r);
            failed++;
        }
    }
    if (failed) return 1;
    printf("threads ok (%d threads x %d rounds)\n", THREADS, ROUNDS);
    return 0;
}
