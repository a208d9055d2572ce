// The smoke kernel: the smallest kernel that proves the whole loop (compile, store,
// load, resolve, launch, check). kart ships this source inside its binary so every
// project can run `kart smoke`; this copy lets the project build it like any kernel.
//
// y[i] = a * x[i] + b for i < n, one element per thread.

extern "C" __global__ void kart_smoke_axpb(const float* __restrict__ x, float* __restrict__ y,
                                           float a, float b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = a * x[i] + b;
    }
}
