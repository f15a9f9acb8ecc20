/* A cold streaming read (caches flushed by a 64 MiB pass) of N MiB from 4 KiB pages and from one
   madvise(MADV_HUGEPAGE) buffer, 40 interleaved rounds, 2 OpenMP threads:
   gcc -O2 -mavx512f -fopenmp stream_read.c -o /tmp/stream_read && OMP_NUM_THREADS=2 /tmp/stream_read 16 */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static float* alloc(size_t bytes,int huge){
  void*p=NULL; posix_memalign(&p,2<<20,bytes);
  if(huge) madvise(p,bytes,MADV_HUGEPAGE);
  memset(p,0,bytes); return p;}
int main(int argc,char**argv){
  size_t n=(size_t)(atof(argv[1])*1048576/4);
  float*a=alloc(n*4,0),*b=alloc(n*4,1),*fl=alloc(64<<20,0);
  for(size_t i=0;i<n;i++){a[i]=b[i]=(i%97)*1e-3f;}
  double best[2]={1e9,1e9}, sum[2]={0,0}; float sink=0;
  for(int r=0;r<40;r++) for(int m=0;m<2;m++){
    float*x=m?b:a;
    #pragma omp parallel for
    for(size_t i=0;i<(16u<<20);i+=16) fl[i]+=1;
    double t0=now();
    __m512 s0=_mm512_setzero_ps(),s1=s0;
    #pragma omp parallel for reduction(+:sink)
    for(size_t j=0;j<n;j+=4096){ __m512 s=_mm512_setzero_ps();
      for(size_t i=j;i<j+4096&&i<n;i+=16) s=_mm512_add_ps(s,_mm512_load_ps(x+i));
      sink+=_mm512_reduce_add_ps(s);}
    double t=now()-t0; if(t<best[m])best[m]=t; sum[m]+=t;
  }
  printf("%.0f MB read: 4K pages best %.1f us mean %.1f | huge best %.1f us mean %.1f  (%g)\n",n*4/1048576.0,best[0]*1e6,sum[0]/40*1e6,best[1]*1e6,sum[1]/40*1e6,sink);
  FILE*f=fopen("/proc/self/smaps_rollup","r");char line[256];while(fgets(line,256,f)) if(strstr(line,"AnonHuge"))fputs(line,stdout);
}
