package stockledger.oracle;

import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.CharBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.Collection;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.Map;

import org.apache.avro.Schema;
import org.apache.avro.SchemaNormalization;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.generic.IndexedRecord;
import org.apache.avro.io.BinaryDecoder;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.DecoderFactory;
import org.apache.avro.io.EncoderFactory;
import org.apache.avro.util.Utf8;

/**
 * Reads payloads (Avro single-object encoding, one hex string a line) and
 * answers a line each, as Apache Avro Java reads them:
 *
 * <ul>
 *   <li>{@code REFUSED <why>}: Avro Java cannot read the datum, or bytes
 *       follow it;
 *   <li>{@code LOSSY <why>}: it reads, but what it read is not the same
 *       bytes written again (text that is not UTF-8, another encoding of
 *       the same value);
 *   <li>{@code OK <resolved>}: it reads, is its value written again, and
 *       {@code <resolved>} is that value resolved into the newest version
 *       of its subject and written (hex).
 * </ul>
 *
 * Arguments: the directory of released schemas ({@code schemas/history}).
 */
public final class AvroOracle {
    private static final HexFormat HEX = HexFormat.of();

    private record Writer(Schema schema, Schema current) {}

    public static void main(String[] args) throws IOException {
        Map<Long, Writer> writers = writers(new File(args[0]));
        PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
        BufferedReader in =
                new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line; (line = in.readLine()) != null; ) {
            out.println(judge(writers, HEX.parseHex(line.trim())));
        }
        out.flush();
    }

    /** Every released version by its fingerprint, beside its subject's newest. */
    private static Map<Long, Writer> writers(File dir) throws IOException {
        Map<String, Schema> newest = new HashMap<>();
        Map<String, Integer> newestVersion = new HashMap<>();
        Map<Long, Schema> byFingerprint = new HashMap<>();
        Map<Long, String> subjectOf = new HashMap<>();
        File[] files = dir.listFiles((d, name) -> name.endsWith(".avsc"));
        if (files == null || files.length == 0) {
            throw new IOException("no .avsc files in " + dir);
        }
        for (File file : files) {
            String[] parts = file.getName().split("\\.");
            String subject = parts[0];
            int version = Integer.parseInt(parts[1].substring(1));
            Schema schema = new Schema.Parser().parse(file);
            long fingerprint = SchemaNormalization.parsingFingerprint64(schema);
            byFingerprint.put(fingerprint, schema);
            subjectOf.put(fingerprint, subject);
            if (version > newestVersion.getOrDefault(subject, 0)) {
                newestVersion.put(subject, version);
                newest.put(subject, schema);
            }
        }
        Map<Long, Writer> writers = new HashMap<>();
        byFingerprint.forEach(
                (fp, schema) -> writers.put(fp, new Writer(schema, newest.get(subjectOf.get(fp)))));
        return writers;
    }

    private static String judge(Map<Long, Writer> writers, byte[] payload) {
        if (payload.length < 10 || payload[0] != (byte) 0xC3 || payload[1] != 0x01) {
            return "REFUSED no single-object header";
        }
        long fingerprint =
                ByteBuffer.wrap(payload, 2, 8).order(ByteOrder.LITTLE_ENDIAN).getLong();
        Writer writer = writers.get(fingerprint);
        if (writer == null) {
            return "REFUSED unknown fingerprint";
        }
        int length = payload.length - 10;
        Object datum;
        Object resolved;
        try {
            BinaryDecoder plain = DecoderFactory.get().binaryDecoder(payload, 10, length, null);
            datum = new GenericDatumReader<Object>(writer.schema()).read(null, plain);
            if (!plain.isEnd()) {
                return "REFUSED bytes after the datum";
            }
            BinaryDecoder again = DecoderFactory.get().binaryDecoder(payload, 10, length, null);
            resolved =
                    new GenericDatumReader<Object>(writer.schema(), writer.current())
                            .read(null, again);
        } catch (IOException | RuntimeException e) {
            return "REFUSED " + e.getClass().getSimpleName() + ": " + e.getMessage();
        }
        String notText = notUtf8(datum);
        if (notText != null) {
            return "LOSSY " + notText;
        }
        byte[] written;
        byte[] current;
        try {
            written = write(writer.schema(), datum);
            current = write(writer.current(), resolved);
        } catch (IOException | RuntimeException e) {
            return "REFUSED cannot be written again: " + e.getMessage();
        }
        byte[] original = java.util.Arrays.copyOfRange(payload, 10, payload.length);
        if (!java.util.Arrays.equals(original, written)) {
            return "LOSSY written again as " + HEX.formatHex(written);
        }
        return "OK " + HEX.formatHex(current);
    }

    private static byte[] write(Schema schema, Object datum) throws IOException {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        BinaryEncoder encoder = EncoderFactory.get().binaryEncoder(bytes, null);
        new GenericDatumWriter<Object>(schema).write(datum, encoder);
        encoder.flush();
        return bytes.toByteArray();
    }

    /** The first string of {@code datum} that is not UTF-8, or null. */
    private static String notUtf8(Object datum) {
        if (datum instanceof Utf8 text) {
            try {
                StandardCharsets.UTF_8
                        .newDecoder()
                        .onMalformedInput(CodingErrorAction.REPORT)
                        .onUnmappableCharacter(CodingErrorAction.REPORT)
                        .decode(ByteBuffer.wrap(text.getBytes(), 0, text.getByteLength()));
                return null;
            } catch (CharacterCodingException e) {
                return "a string is not UTF-8";
            }
        }
        if (datum instanceof IndexedRecord record) {
            for (int i = 0; i < record.getSchema().getFields().size(); i++) {
                String found = notUtf8(record.get(i));
                if (found != null) {
                    return found;
                }
            }
        }
        if (datum instanceof Collection<?> items) {
            for (Object item : items) {
                String found = notUtf8(item);
                if (found != null) {
                    return found;
                }
            }
        }
        return null;
    }

    private AvroOracle() {}
}
