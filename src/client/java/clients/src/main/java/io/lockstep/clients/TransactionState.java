package io.lockstep.clients;

/**
 * The state of a share transaction, with its wire code (INT8, schemas/share-transactions.md).
 * EMPTY → ONGOING → PREPARE → COMMITTED, or → ABORTED from ONGOING or PREPARE.
 */
public enum TransactionState {
    /** A known id with nothing begun. */
    EMPTY((byte) 0),
    /** Begun; acknowledgements may join. */
    ONGOING((byte) 1),
    /** Phase 1 done: the locks are durable. */
    PREPARE((byte) 2),
    /** The locked records are acknowledged for good. */
    COMMITTED((byte) 3),
    /** The locked records became available again. */
    ABORTED((byte) 4);

    private final byte code;

    TransactionState(byte code) {
        this.code = code;
    }

    /** The wire code. */
    public byte code() {
        return code;
    }

    /** Whether the transaction is still pending (ONGOING or PREPARE). */
    public boolean isPending() {
        return this == ONGOING || this == PREPARE;
    }

    /**
     * The state of wire code {@code code}.
     *
     * @throws IllegalArgumentException if the code is not 0-4
     */
    public static TransactionState forCode(byte code) {
        for (TransactionState s : values()) {
            if (s.code == code) {
                return s;
            }
        }
        throw new IllegalArgumentException("unknown share transaction state code " + code);
    }
}
