/**
 * Not public API: the blocking network layer ({@link io.lockstep.clients.internals.BrokerConnection},
 * {@link io.lockstep.clients.internals.NodePool}), the hand-written codecs of keys 1000-1005 ({@link
 * io.lockstep.clients.internals.ShareTxnMessages} over {@link io.lockstep.clients.internals.Wire}),
 * and the pending-acknowledgement bookkeeping ({@link io.lockstep.clients.internals.PendingAcks}).
 */
package io.lockstep.clients.internals;
