set -u
C=$(dirname $(dirname $(command -v nvcc || echo /usr/local/cuda/bin/nvcc)))
cd .gpu/ctxprobe && gcc -O2 -o ctx ctx.c -I$C/include -L$C/lib64/stubs -L$C/lib64 -lcuda -lpthread || exit 1
for i in 1 2 3 4 5 6; do
 for m in p0 p1 p01 c01 s01; do ./ctx $m 2>&1 | tr '\n' ' '; echo; done
 echo -n "two processes (p0 | p1) at once: "; (./ctx p0 & ./ctx p1 & wait) 2>&1 | tr '\n' ' '; echo
 echo -n "VIS=0 p0: "; CUDA_VISIBLE_DEVICES=0 ./ctx p0 2>&1 | tr '\n' ' '; echo
done
