package io.lockstep.clients;

import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * What {@link LockstepShareTransactionCoordinator#recover} did with each pending transaction of the
 * group: committed (a PREPARE whose checkpoint the caller says completed, or one found committed
 * meanwhile), aborted (everything else), or failed (the call's error; still pending).
 */
public final class RecoveryReport {
    private final List<String> committed = new ArrayList<>();
    private final List<String> aborted = new ArrayList<>();
    private final Map<String, RuntimeException> failed = new LinkedHashMap<>();

    void addCommitted(String id) {
        committed.add(id);
    }

    void addAborted(String id) {
        aborted.add(id);
    }

    void addFailed(String id, RuntimeException e) {
        failed.put(id, e);
    }

    /** Transactions committed by the recovery. */
    public List<String> committed() {
        return Collections.unmodifiableList(committed);
    }

    /** Transactions aborted by the recovery. */
    public List<String> aborted() {
        return Collections.unmodifiableList(aborted);
    }

    /** Transactions whose commit or abort failed, with the error. */
    public Map<String, RuntimeException> failed() {
        return Collections.unmodifiableMap(failed);
    }

    @Override
    public String toString() {
        return "RecoveryReport(committed=" + committed + ", aborted=" + aborted + ", failed="
                + failed.keySet() + ")";
    }
}
