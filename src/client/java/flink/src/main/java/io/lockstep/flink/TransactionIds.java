package io.lockstep.flink;

import io.lockstep.clients.TransactionState;
import java.security.SecureRandom;
import java.util.Objects;
import java.util.Optional;

/**
 * The source's transaction ids and the recovery rule over them (pure functions, no I/O).
 *
 * <p>Form: {@code {group}-{prefix}-{subtask}-{token}-{checkpointId}}, the KIP's {@code
 * {groupId}-{transactionalIdPrefix}-{checkpointId}} with the transactional id prefix {@code
 * {prefix}-{subtask}-{token}}:
 *
 * <ul>
 *   <li>{@code prefix}: the builder's transactional id prefix (stable across runs of one job, so a
 *       restored job finds its predecessors' transactions);
 *   <li>{@code subtask}: the reader's subtask index (a region failover recovers only its own);
 *   <li>{@code token}: random per reader instance (no id is ever reused: a restored reader guesses
 *       the same checkpoint ids as the instance that failed, and a begin of an id the broker knows
 *       would keep the old transaction);
 *   <li>{@code checkpointId}: {@code last checkpoint this reader instance snapshotted (or was
 *       restored from) + 1}: the checkpoint that will prepare it, or an earlier one that this reader
 *       never snapshotted (Flink skips ids of checkpoints aborted before they reach a task).
 * </ul>
 *
 * <p>Recovery rule ({@link #decide}), from a restore of completed checkpoint {@code C}: a PREPARE
 * transaction with {@code checkpointId <= C} is committed; every other pending transaction of the
 * prefix is aborted. Why this is exact: a transaction named {@code n} is prepared by the first
 * checkpoint {@code m >= n} this reader instance snapshots, and no checkpoint in {@code [n, m)} can
 * complete (it would need this reader's snapshot). So if {@code C >= n}, C is one of this reader's
 * later snapshots and its barrier came after every record of the transaction: the sink holds them,
 * commit. If {@code C < n}, the records were emitted after the barrier of every completed
 * checkpoint: the sink discarded them, abort (they come back).
 */
public final class TransactionIds {
    private static final SecureRandom RANDOM = new SecureRandom();
    /** Characters of a token (base 36, no '-'), ~41 bits. */
    static final int TOKEN_CHARS = 8;

    private TransactionIds() {}

    /** What a recovery does with one pending transaction. */
    public enum Decision {
        COMMIT,
        ABORT,
        /** Not this source's transaction (another prefix, or another subtask in a scoped recovery). */
        IGNORE
    }

    /** A parsed transaction id of this source. */
    public static final class Parsed {
        public final int subtask;
        public final String token;
        public final long checkpointId;

        Parsed(int subtask, String token, long checkpointId) {
            this.subtask = subtask;
            this.token = token;
            this.checkpointId = checkpointId;
        }
    }

    /** A fresh token for one reader instance. */
    public static String newToken() {
        StringBuilder sb = new StringBuilder(TOKEN_CHARS);
        for (int i = 0; i < TOKEN_CHARS; i++) {
            sb.append(Character.forDigit(RANDOM.nextInt(36), 36));
        }
        return sb.toString();
    }

    /** The id of the transaction that subtask {@code subtask} opens after checkpoint {@code checkpointId - 1}. */
    public static String format(String group, String prefix, int subtask, String token, long checkpointId) {
        if (subtask < 0 || checkpointId < 0 || token.isEmpty() || token.indexOf('-') >= 0) {
            throw new IllegalArgumentException("bad transaction id parts: subtask=" + subtask
                    + " token=" + token + " checkpoint=" + checkpointId);
        }
        return group + "-" + prefix + "-" + subtask + "-" + token + "-" + checkpointId;
    }

    /**
     * Parses {@code id} if it is of this source ({@code group}, {@code prefix}); empty for any other
     * id of the group (another job's prefix, a hand-made transaction). Ids of a prefix that extends
     * this one ({@code prefix-x}) never parse: tokens and numbers hold no '-', so the rest has more
     * than three parts.
     */
    public static Optional<Parsed> parse(String group, String prefix, String id) {
        String head = group + "-" + prefix + "-";
        if (!id.startsWith(head)) {
            return Optional.empty();
        }
        String[] parts = id.substring(head.length()).split("-", -1);
        if (parts.length != 3 || parts[1].isEmpty()) {
            return Optional.empty();
        }
        try {
            int subtask = Integer.parseInt(parts[0]);
            long checkpoint = Long.parseLong(parts[2]);
            if (subtask < 0 || checkpoint < 0 || !parts[0].equals(Integer.toString(subtask))
                    || !parts[2].equals(Long.toString(checkpoint))) {
                return Optional.empty();
            }
            return Optional.of(new Parsed(subtask, parts[1], checkpoint));
        } catch (NumberFormatException e) {
            return Optional.empty();
        }
    }

    /**
     * The recovery rule for pending transaction {@code id} in state {@code state}, after a restore
     * of completed checkpoint {@code restoredCheckpointId} (0: no checkpoint, a fresh start), for
     * the transactions of subtask {@code onlySubtask} (or of every subtask if it is negative).
     */
    public static Decision decide(String group, String prefix, String id, TransactionState state,
            long restoredCheckpointId, int onlySubtask) {
        Objects.requireNonNull(state, "state");
        Optional<Parsed> parsed = parse(group, prefix, id);
        if (!state.isPending() || parsed.isEmpty()
                || (onlySubtask >= 0 && parsed.get().subtask != onlySubtask)) {
            return Decision.IGNORE;
        }
        if (state == TransactionState.PREPARE && parsed.get().checkpointId <= restoredCheckpointId) {
            return Decision.COMMIT;
        }
        return Decision.ABORT;
    }
}
