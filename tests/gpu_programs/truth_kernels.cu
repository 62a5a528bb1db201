// The kernels the driver-API program loads, compiled to PTX (nvcc -ptx).
#include "truth.cuh"
