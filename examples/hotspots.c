/*
 * The bundled example for `wasmspy record`: a few functions with different costs, so the
 * profile has something to show. Rebuild with examples/build.sh.
 */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) static int is_prime(unsigned n) {
    if (n < 2)
        return 0;
    for (unsigned d = 2; d * d <= n; d++)
        if (n % d == 0)
            return 0;
    return 1;
}

__attribute__((noinline)) static unsigned count_primes(unsigned limit) {
    unsigned count = 0;
    for (unsigned n = 0; n < limit; n++)
        count += is_prime(n);
    return count;
}

__attribute__((noinline)) static void insertion_sort(unsigned *a, size_t n) {
    for (size_t i = 1; i < n; i++) {
        unsigned v = a[i];
        size_t j = i;
        while (j > 0 && a[j - 1] > v) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = v;
    }
}

__attribute__((noinline)) static unsigned sort_random(size_t n) {
    unsigned *a = malloc(n * sizeof *a);
    unsigned x = 12345;
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        a[i] = x >> 8;
    }
    insertion_sort(a, n);
    unsigned median = a[n / 2];
    free(a);
    return median;
}

__attribute__((noinline)) static int mandelbrot_escape(double cr, double ci) {
    double zr = 0, zi = 0;
    int i = 0;
    while (i < 500 && zr * zr + zi * zi < 4.0) {
        double t = zr * zr - zi * zi + cr;
        zi = 2 * zr * zi + ci;
        zr = t;
        i++;
    }
    return i;
}

__attribute__((noinline)) static unsigned mandelbrot_inside(int size) {
    unsigned inside = 0;
    for (int y = 0; y < size; y++)
        for (int x = 0; x < size; x++)
            inside += mandelbrot_escape(-2.0 + 2.5 * x / size, -1.25 + 2.5 * y / size) == 500;
    return inside;
}

int main(void) {
    printf("primes below 3000000: %u\n", count_primes(3000000));
    printf("median of 40000 sorted numbers: %u\n", sort_random(40000));
    printf("mandelbrot points inside (400x400): %u\n", mandelbrot_inside(400));
    return 0;
}
