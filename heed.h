// heed.h: everything a training program needs, in one include.
#pragma once

#include "core/error.h"
#include "core/kernels.h"
#include "core/tensor.h"
#include "core/random.h"
#include "core/format.h"
#include "autograd/autograd.h"
#include "autograd/ops.h"
#include "autograd/gradcheck.h"
#include "layers/module.h"
#include "layers/basic.h"
#include "layers/self_attention.h"
