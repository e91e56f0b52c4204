/* doctor REGISTRY TRUST_ROOT [SM [DRIVER_VERSION]]: which blob of every module of a
 * cuda-aot registry would load on a device, or why none would, through the C ABI
 * (cuda_aot_doctor), as `cargo xtask doctor` says it. The device is described by its plain
 * SM (sm_89) and its driver's CUDA version as cuDriverGetVersion gives it (12040 for 12.4;
 * left out or 0: floors not checked); without SM this host's device 0 is probed, which
 * needs the CUDA driver.
 *
 * Prints the table `cargo xtask doctor` prints, then one line per module with the fields a
 * program reads (module, status, target, kind, driver floor). Exits 0 when every module
 * would load, 1 when one would not or the registry is refused (the error and its Fix:
 * line on stderr), 2 for a usage error. Nothing is loaded and no state is written.
 *
 * Build (docs/capi.md):
 *   cargo xtask install-capi --prefix .cuda-aot/capi
 *   cc examples/c/doctor.c -I.cuda-aot/capi/include -L.cuda-aot/capi/lib -lcuda_aot_capi \
 *      -Wl,-rpath,"$PWD/.cuda-aot/capi/lib" -o doctor
 */
#include <stdio.h>
#include <stdlib.h>

#include "cuda_aot.h"

int main(int argc, char **argv) {
    if (argc < 3 || argc > 5) {
        fprintf(stderr, "usage: %s REGISTRY TRUST_ROOT [SM [DRIVER_VERSION]]\n", argv[0]);
        return 2;
    }
    const char *sm = argc > 3 ? argv[3] : NULL;
    int driver = argc > 4 ? atoi(argv[4]) : 0;
    cuda_aot_doctor_report *report = NULL;
    cuda_aot_status status = cuda_aot_doctor(argv[1], argv[2], NULL, sm, driver, &report);
    if (status != CUDA_AOT_STATUS_OK) {
        fprintf(stderr, "error: %s (%s)\nFix: %s\n", cuda_aot_last_error_message(),
                cuda_aot_status_name(status), cuda_aot_last_error_fix());
        return 1;
    }
    printf("%s", cuda_aot_doctor_report_text(report));
    for (size_t i = 0; i < cuda_aot_doctor_report_module_count(report); i++) {
        cuda_aot_diagnosis d;
        cuda_aot_doctor_report_module(report, i, &d);
        if (d.status == CUDA_AOT_STATUS_OK) {
            printf("module %s %s loads %s %s (driver %s or newer)\n", d.module,
                   cuda_aot_status_name(d.status), d.target, d.kind, d.driver_floor);
        } else {
            printf("module %s %s has %s\n", d.module, cuda_aot_status_name(d.status),
                   d.available);
        }
    }
    size_t refused = cuda_aot_doctor_report_refused(report);
    cuda_aot_doctor_report_free(report);
    return refused == 0 ? 0 : 1;
}
