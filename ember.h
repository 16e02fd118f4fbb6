/** @file
 * ember — the umbrella header: include this and nothing else.
 * Layers (DESIGN.md §1): tensor -> amp -> autograd -> nn -> optim -> data -> distributed. */
#ifndef EMBER_H
#define EMBER_H

#include "tensor/tensor.h"
#include "amp/amp.h"
#include "autograd/autograd.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "data/data.h"
#include "distributed/distributed.h"

#endif
