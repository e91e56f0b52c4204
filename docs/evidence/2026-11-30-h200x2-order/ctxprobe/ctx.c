// Context-creation probe: how the driver creates contexts on one or two devices.
// usage: ctx MODE   MODE: p0 (primary dev0), p01 (primary 0,1 two threads),
//                         c01 (cuCtxCreate 0,1 two threads), s01 (primary 0 then 1, one thread),
//                         p1 (primary dev1)
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
static double t0;
static double now(void){struct timespec ts;clock_gettime(CLOCK_MONOTONIC,&ts);return ts.tv_sec*1e6+ts.tv_nsec/1e3;}
static int mode_create;
static void *mk(void *arg){int d=(int)(long)arg;CUdevice dev;CUcontext c;cuDeviceGet(&dev,d);
 double a=now();CUresult r;
 if(mode_create){r=cuCtxCreate(&c,NULL,0,dev);} else {r=cuDevicePrimaryCtxRetain(&c,dev); if(!r) r=cuCtxSetCurrent(c);}
 CUdeviceptr p; if(!r) r=cuMemAlloc(&p,1<<20);
 double b=now(); fprintf(stderr,"dev%d ctx %s %.0f..%.0f us (%.0f)\n",d,r?"FAIL":"ok",a-t0,b-t0,b-a);return NULL;}
int main(int argc,char**argv){t0=now();const char*m=argv[1];
 CUresult r=cuInit(0);double ti=now()-t0;int n;cuDeviceGetCount(&n);
 mode_create = m[0]=='c';
 if(!strcmp(m,"p0")) mk((void*)0);
 else if(!strcmp(m,"p1")) mk((void*)1);
 else if(!strcmp(m,"s01")) {mk((void*)0);mk((void*)1);}
 else {pthread_t a,b;pthread_create(&a,0,mk,(void*)0);pthread_create(&b,0,mk,(void*)1);pthread_join(a,0);pthread_join(b,0);}
 printf("%s init=%d devices=%d cuInit_us=%.0f total_us=%.0f\n",m,r,n,ti,now()-t0);return 0;}
