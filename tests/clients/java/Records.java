import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;

/** Deterministic test records: the same generator as tests/clients/python/records.py (see there). */
final class Records {
    /** Timestamp of record 0 (ms); chosen at produce time, normally now (see records.py). */
    static long baseTs = System.currentTimeMillis();
    static final byte[] BLOB = blob();

    private Records() {}

    private static byte[] blob() {
        long x = 0x9E3779B97F4A7C15L;
        byte[] out = new byte[65536];
        for (int n = 0; n < out.length; n++) {
            x ^= x << 13;
            x ^= x >>> 7;
            x ^= x << 17;
            out[n] = (byte) x;
        }
        return out;
    }

    private static byte[] concat(byte[] a, byte[] b) {
        byte[] r = Arrays.copyOf(a, a.length + b.length);
        System.arraycopy(b, 0, r, a.length, b.length);
        return r;
    }

    static byte[] ascii(String s) {
        return s.getBytes(StandardCharsets.US_ASCII);
    }

    static byte[] key(long i) {
        if (i % 97 == 0) return null;
        int o = (int) (i % 1000);
        return concat(ascii("key-" + i + "-"), Arrays.copyOfRange(BLOB, o, o + 8));
    }

    static byte[] value(long i) {
        if (i % 101 == 0) return null;
        if (i % 89 == 0) return new byte[0];
        int o = (int) ((i * 131) % 60000);
        return Arrays.copyOfRange(BLOB, o, o + (int) ((i * 37) % 700) + 1);
    }

    static List<Header> headers(long i) {
        List<Header> h = new ArrayList<>();
        if (i % 5 == 0) return h;
        int o = (int) (i % 777);
        h.add(new RecordHeader("idx", ascii(Long.toString(i))));
        h.add(new RecordHeader("bin", Arrays.copyOfRange(BLOB, o, o + (int) (i % 16))));
        if (i % 7 == 0) {
            h.add(new RecordHeader("idx", ascii("dup")));
            h.add(new RecordHeader("nul", (byte[]) null));
        }
        return h;
    }

    static long timestamp(long i) {
        return baseTs + i;
    }

    static boolean sameHeaders(List<Header> want, Iterable<Header> got) {
        List<Header> g = new ArrayList<>();
        got.forEach(g::add);
        if (g.size() != want.size()) return false;
        for (int n = 0; n < want.size(); n++) {
            if (!want.get(n).key().equals(g.get(n).key())) return false;
            if (!Arrays.equals(want.get(n).value(), g.get(n).value())) return false;
        }
        return true;
    }

    /** Prints the one line the Rust harness parses: RESULT {json}. Values: Number, Boolean, String. */
    static void result(Map<String, Object> m) {
        StringBuilder sb = new StringBuilder("RESULT {");
        boolean first = true;
        for (Map.Entry<String, Object> e : new TreeMap<>(m).entrySet()) {
            if (!first) sb.append(", ");
            first = false;
            sb.append('"').append(e.getKey()).append("\": ");
            Object v = e.getValue();
            if (v instanceof Number || v instanceof Boolean) sb.append(v);
            else sb.append('"').append(String.valueOf(v).replace("\\", "\\\\").replace("\"", "\\\"")).append('"');
        }
        System.out.println(sb.append('}'));
        System.out.flush();
    }

    static void log(String s) {
        System.err.println(s);
        System.err.flush();
    }
}
