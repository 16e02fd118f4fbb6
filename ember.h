/** @file
 * ember — the umbrella header: include this and nothing else.
 * Layers (DESIGN.md §1): tensor -> amp -> autograd -> nn -> optim -> data -> distributed
 * (pg -> ddp -> accelerate, with tracking apart; distributed/distributed.h includes the four). */
#ifndef EMBER_H
#define EMBER_H

#include "tensor/tensor.h"
#include "amp/amp.h"
#include "autograd/autograd.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "data/data.h"
#include "distributed/pg/pg.h"
#include "distributed/ddp/ddp.h"
#include "distributed/accelerate/accelerator.h"
#include "distributed/tracking/tracking.h"

#endif
