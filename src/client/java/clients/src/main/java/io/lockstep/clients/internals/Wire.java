package io.lockstep.clients.internals;

import java.io.ByteArrayOutputStream;
import java.nio.BufferUnderflowException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import org.apache.kafka.common.Uuid;

/**
 * The Kafka protocol's flexible-version primitives for the hand-written codecs of keys 1000-1005:
 * big-endian integers, UUIDs, compact (unsigned-varint length + 1) strings and arrays, and the
 * tagged-field section that ends every structure (written empty, skipped on read).
 */
public final class Wire {
    private Wire() {}

    /** An encoder into a growing byte array. */
    public static final class Writer {
        private final ByteArrayOutputStream out = new ByteArrayOutputStream();

        public Writer int8(byte v) {
            out.write(v);
            return this;
        }

        public Writer int16(short v) {
            out.write(v >>> 8);
            out.write(v);
            return this;
        }

        public Writer int32(int v) {
            for (int shift = 24; shift >= 0; shift -= 8) {
                out.write(v >>> shift);
            }
            return this;
        }

        public Writer int64(long v) {
            for (int shift = 56; shift >= 0; shift -= 8) {
                out.write((int) (v >>> shift));
            }
            return this;
        }

        public Writer uuid(Uuid v) {
            return int64(v.getMostSignificantBits()).int64(v.getLeastSignificantBits());
        }

        public Writer unsignedVarint(int v) {
            while ((v & 0xffffff80) != 0) {
                out.write((v & 0x7f) | 0x80);
                v >>>= 7;
            }
            out.write(v);
            return this;
        }

        /** A compact string; {@code null} only where the field is nullable. */
        public Writer compactString(String v) {
            if (v == null) {
                return unsignedVarint(0);
            }
            byte[] bytes = v.getBytes(StandardCharsets.UTF_8);
            unsignedVarint(bytes.length + 1);
            out.write(bytes, 0, bytes.length);
            return this;
        }

        /** The length prefix of a compact array of {@code n} elements. */
        public Writer arrayLength(int n) {
            return unsignedVarint(n + 1);
        }

        /** An empty tagged-field section. */
        public Writer noTaggedFields() {
            return unsignedVarint(0);
        }

        public byte[] toByteArray() {
            return out.toByteArray();
        }
    }

    /** A decoder over a buffer; any truncation or bad length is a {@link MalformedException}. */
    public static final class Reader {
        private final ByteBuffer buffer;

        public Reader(ByteBuffer buffer) {
            this.buffer = buffer;
        }

        public byte int8() {
            try {
                return buffer.get();
            } catch (BufferUnderflowException e) {
                throw new MalformedException("truncated message");
            }
        }

        public short int16() {
            try {
                return buffer.getShort();
            } catch (BufferUnderflowException e) {
                throw new MalformedException("truncated message");
            }
        }

        public int int32() {
            try {
                return buffer.getInt();
            } catch (BufferUnderflowException e) {
                throw new MalformedException("truncated message");
            }
        }

        public long int64() {
            try {
                return buffer.getLong();
            } catch (BufferUnderflowException e) {
                throw new MalformedException("truncated message");
            }
        }

        public Uuid uuid() {
            return new Uuid(int64(), int64());
        }

        public int unsignedVarint() {
            return readUnsignedVarint(buffer);
        }

        /** A compact nullable string. */
        public String compactNullableString() {
            int n = unsignedVarint() - 1;
            if (n < 0) {
                return null;
            }
            if (n > buffer.remaining()) {
                throw new MalformedException("string length " + n + " beyond the message");
            }
            byte[] bytes = new byte[n];
            buffer.get(bytes);
            return new String(bytes, StandardCharsets.UTF_8);
        }

        /** A compact non-nullable string. */
        public String compactString() {
            String s = compactNullableString();
            if (s == null) {
                throw new MalformedException("null in a non-nullable string");
            }
            return s;
        }

        /** The element count of a compact non-nullable array. */
        public int arrayLength() {
            int n = unsignedVarint() - 1;
            if (n < 0 || n > buffer.remaining()) {
                throw new MalformedException("bad array length " + n);
            }
            return n;
        }

        public void skipTaggedFields() {
            Wire.skipTaggedFields(buffer);
        }

        /** Fails unless the whole message was read. */
        public void expectEnd() {
            if (buffer.hasRemaining()) {
                throw new MalformedException(buffer.remaining() + " bytes after the message");
            }
        }
    }

    /** A message that does not decode. */
    public static final class MalformedException extends org.apache.kafka.common.KafkaException {
        private static final long serialVersionUID = 1L;

        public MalformedException(String message) {
            super("malformed share-transaction message: " + message);
        }
    }

    static int readUnsignedVarint(ByteBuffer buffer) {
        int value = 0;
        for (int shift = 0; shift < 35; shift += 7) {
            if (!buffer.hasRemaining()) {
                throw new MalformedException("truncated varint");
            }
            int b = buffer.get() & 0xff;
            value |= (b & 0x7f) << shift;
            if ((b & 0x80) == 0) {
                return value;
            }
        }
        throw new MalformedException("varint longer than 5 bytes");
    }

    /** Skips a tagged-field section (count, then tag, size, bytes for each). */
    static void skipTaggedFields(ByteBuffer buffer) {
        int count = readUnsignedVarint(buffer);
        for (int i = 0; i < count; i++) {
            readUnsignedVarint(buffer);
            int size = readUnsignedVarint(buffer);
            if (size < 0 || size > buffer.remaining()) {
                throw new MalformedException("tagged field size " + size + " beyond the message");
            }
            buffer.position(buffer.position() + size);
        }
    }
}
