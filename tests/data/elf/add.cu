extern "C" __global__ void add(const unsigned long long* a, unsigned long long* b, int n){int i=blockIdx.x*blockDim.x+threadIdx.x; if(i<n) b[i]+=a[i];}
