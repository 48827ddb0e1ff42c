// Stand-in for CUDA's cuda_bf16.h under the CPU emulator: cuda_emu.h already provides the bf16 type.
#pragma once
#include "../cuda_emu.h"
