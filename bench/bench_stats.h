/* Order statistics of timings, for every benchmark. */
#ifndef GIANT_BENCH_STATS_H
#define GIANT_BENCH_STATS_H

/* Sorts v[0..n) in place, ascending. */
void bench_sort(double *v, int n);
/* Sorts v[0..n) in place and returns its median (the mean of the middle
 * two when n is even). */
double bench_median(double *v, int n);

#endif
