set -u
C=$(dirname $(dirname $(command -v nvcc || echo /usr/local/cuda/bin/nvcc)))
cd .gpu/ctxprobe && gcc -O2 -o ctx ctx.c -I$C/include -L$C/lib64/stubs -L$C/lib64 -lcuda -lpthread || exit 1
for i in 1 2 3 4; do
 for n in 8 4 2 1; do
  for m in p0 s01 p01; do echo -n "connections=$n "; CUDA_DEVICE_MAX_CONNECTIONS=$n ./ctx $m 2>&1 | tr '\n' ' '; echo; done
 done
done
