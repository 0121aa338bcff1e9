/*
 * The cost model's parameters (cost_model.h).
 *
 * A message step costs alpha + bytes * beta, a reduced byte gamma more.
 * Numbers (measured orders of magnitude on current x86 servers, stated here
 * as the model's assumptions):
 *   shm  alpha 0.8 us (flag handshake through a shared slot, futex wake-up
 *        amortised), beta 0.15 ns/B (two memcpys through the slot, about
 *        6.7 GB/s end to end), gamma 0.1 ns/B (vectorised reduction, 10 GB/s)
 *   tcp  alpha 30 us (send/recv system calls and one network hop),
 *        beta 0.8 ns/B (about 1.25 GB/s: 10 GbE), gamma 0.1 ns/B
 * A burst of messages to different peers costs alpha once plus a posting
 * overhead of alpha / 4 per message.
 */
#include "cost_model.h"

#include <stddef.h>

static const select_model models[SELECT_TP_NUM] = {
    {0.8, 0.15, 0.1, 0.2}, /* shm */
    {30.0, 0.8, 0.1, 7.5}, /* tcp */
};

const select_model *select_model_get(int transport_class) {
  if (transport_class < 0 || transport_class >= SELECT_TP_NUM)
    return NULL;
  return &models[transport_class];
}
