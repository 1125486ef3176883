package stockledger.example;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.UUID;
import java.util.concurrent.Future;
import java.util.stream.Stream;

import org.apache.avro.Schema;
import org.apache.avro.SchemaNormalization;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.DecoderFactory;
import org.apache.avro.io.EncoderFactory;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * A small order service in Java, written only against what stockledger publishes: the schemas in
 * schemas/history/ and the wire format in docs/producers.md ("Publishing from any language").
 *
 * <p>For each of a few SKUs it runs one checkout (restock, hold, confirm, a plain order rolled
 * back, a duplicate, a refusal), reads the applier's decisions from the outcomes topic, and exits 1
 * unless every decision is the one the ledger's rules give. The producer is the official one with
 * its default partitioner (murmur2 of the key) and the idempotent settings; the values are Avro
 * single-object encoded by Apache Avro's own library.
 */
public final class OrderService {
  private static final byte[] MAGIC = {(byte) 0xC3, (byte) 0x01};

  /** One command sent, with the decision the ledger's rules give it. */
  private static final class Step {
    final String sku;
    final String kind;
    final GenericRecord body;
    final String expected;
    int partition;
    long offset;
    GenericRecord outcome;

    Step(String sku, String kind, GenericRecord body, String expected) {
      this.sku = sku;
      this.kind = kind;
      this.body = body;
      this.expected = expected;
    }
  }

  private final Schema command;
  private final byte[] commandHeader;
  private final Map<Long, Schema> outcomes = new HashMap<>();
  private final Schema newestOutcome;

  private OrderService(Path history) throws IOException {
    TreeMap<Integer, Schema> commands = released(history, "Command");
    command = commands.lastEntry().getValue();
    commandHeader = header(command);
    TreeMap<Integer, Schema> outcomeVersions = released(history, "Outcome");
    for (Schema s : outcomeVersions.values()) {
      outcomes.put(SchemaNormalization.parsingFingerprint64(s), s);
    }
    newestOutcome = outcomeVersions.lastEntry().getValue();
  }

  /** Every released version of {@code subject} in {@code history}, by version number. */
  private static TreeMap<Integer, Schema> released(Path history, String subject)
      throws IOException {
    TreeMap<Integer, Schema> versions = new TreeMap<>();
    try (Stream<Path> files = Files.list(history)) {
      for (Path file : (Iterable<Path>) files::iterator) {
        String name = file.getFileName().toString();
        if (name.startsWith(subject + ".v") && name.endsWith(".avsc")) {
          int version = Integer.parseInt(name.substring(subject.length() + 2, name.length() - 5));
          versions.put(version, new Schema.Parser().parse(file.toFile()));
        }
      }
    }
    if (versions.isEmpty()) {
      throw new IOException("no " + subject + ".v*.avsc in " + history);
    }
    return versions;
  }

  /** C3 01, then the schema's CRC-64-AVRO fingerprint, little-endian. */
  private static byte[] header(Schema schema) {
    return ByteBuffer.allocate(10)
        .order(ByteOrder.LITTLE_ENDIAN)
        .put(MAGIC)
        .putLong(SchemaNormalization.parsingFingerprint64(schema))
        .array();
  }

  private GenericRecord body(String name) {
    Schema union = command.getField("body").schema();
    for (Schema branch : union.getTypes()) {
      if (branch.getFullName().equals("stockledger." + name)) {
        // Every field with a default starts at it, as GenericRecordBuilder
        // does: what a newer schema adds (an empty list of named units) is
        // then written without this service knowing of it.
        GenericData.Record record = new GenericData.Record(branch);
        for (Schema.Field field : branch.getFields()) {
          if (field.hasDefaultValue()) {
            Object value = GenericData.get().getDefaultValue(field);
            record.put(field.pos(), GenericData.get().deepCopy(field.schema(), value));
          }
        }
        return record;
      }
    }
    throw new IllegalStateException("Command has no body " + name);
  }

  private byte[] encode(String sku, GenericRecord body) throws IOException {
    GenericRecord datum = new GenericData.Record(command);
    datum.put("command_id", UUID.randomUUID().toString());
    datum.put("sku", sku);
    datum.put("occurred_at", System.currentTimeMillis());
    datum.put("body", body);
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    out.write(commandHeader);
    BinaryEncoder encoder = EncoderFactory.get().binaryEncoder(out, null);
    new GenericDatumWriter<GenericRecord>(command).write(datum, encoder);
    encoder.flush();
    return out.toByteArray();
  }

  private GenericRecord decode(byte[] payload) throws IOException {
    if (payload.length < 10 || payload[0] != MAGIC[0] || payload[1] != MAGIC[1]) {
      throw new IOException("not Avro single-object encoding");
    }
    long fingerprint = ByteBuffer.wrap(payload, 2, 8).order(ByteOrder.LITTLE_ENDIAN).getLong();
    Schema writer = outcomes.get(fingerprint);
    if (writer == null) {
      throw new IOException(String.format("unknown outcome schema fingerprint %016x", fingerprint));
    }
    return new GenericDatumReader<GenericRecord>(writer, newestOutcome)
        .read(null, DecoderFactory.get().binaryDecoder(payload, 10, payload.length - 10, null));
  }

  /** One SKU's checkout, in order, each command with the decision it must get. */
  private List<Step> checkout(String sku) {
    List<Step> steps = new ArrayList<>();
    GenericRecord restock = body("Restock");
    restock.put("adjustment_id", sku + "-initial");
    restock.put("mode", new GenericData.EnumSymbol(restock.getSchema().getField("mode").schema(), "SET"));
    restock.put("quantity", 5L);
    steps.add(new Step(sku, "RESTOCK", restock, "APPLIED"));
    GenericRecord hold = deduct("o1", 2);
    hold.put("user_id", "u1");
    hold.put("expires_at", System.currentTimeMillis() + 600_000L);
    steps.add(new Step(sku, "DEDUCT", hold, "APPLIED"));
    GenericRecord confirm = body("Confirm");
    confirm.put("order_id", "o1");
    steps.add(new Step(sku, "CONFIRM", confirm, "CONFIRMED"));
    steps.add(new Step(sku, "DEDUCT", deduct("o2", 2), "APPLIED"));
    GenericRecord rollback = body("Rollback");
    rollback.put("order_id", "o2");
    rollback.put("reason", "payment failed");
    steps.add(new Step(sku, "ROLLBACK", rollback, "APPLIED"));
    steps.add(new Step(sku, "DEDUCT", deduct("o3", 1), "APPLIED"));
    steps.add(new Step(sku, "DEDUCT", deduct("o3", 1), "DUPLICATE"));
    steps.add(new Step(sku, "DEDUCT", deduct("o4", 5), "REJECTED_INSUFFICIENT"));
    return steps;
  }

  private GenericRecord deduct(String order, long quantity) {
    GenericRecord deduct = body("Deduct");
    deduct.put("order_id", order);
    deduct.put("quantity", quantity);
    return deduct;
  }

  private static Map<String, String> options(String[] args) {
    Map<String, String> options = new HashMap<>();
    options.put("--brokers", env("KAFKA_BROKERS", "127.0.0.1:9092"));
    options.put("--topic", env("STOCKLEDGER_TOPIC", "stock.ledger"));
    options.put("--outcomes-topic", env("STOCKLEDGER_OUTCOMES_TOPIC", "stock.ledger.outcomes"));
    options.put("--schemas", "schemas/history");
    options.put("--sku-prefix", "JAVA");
    options.put("--skus", "4");
    options.put("--timeout", "60");
    for (int i = 0; i < args.length; i += 2) {
      if (!options.containsKey(args[i]) || i + 1 >= args.length) {
        System.err.println("usage: order-service " + String.join(" ", options.keySet().stream()
            .sorted().map(k -> "[" + k + " VALUE]").toList()));
        System.exit(2);
      }
      options.put(args[i], args[i + 1]);
    }
    return options;
  }

  private static String env(String name, String otherwise) {
    String value = System.getenv(name);
    return value == null || value.isEmpty() ? otherwise : value;
  }

  public static void main(String[] args) throws Exception {
    Map<String, String> o = options(args);
    OrderService service = new OrderService(Path.of(o.get("--schemas")));
    String topic = o.get("--topic");

    Properties producerProps = new Properties();
    producerProps.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, o.get("--brokers"));
    producerProps.put(ProducerConfig.ACKS_CONFIG, "all");
    producerProps.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
    List<Step> sent = new ArrayList<>();
    List<Future<RecordMetadata>> acks = new ArrayList<>();
    try (KafkaProducer<String, byte[]> producer =
        new KafkaProducer<>(producerProps, new StringSerializer(), new ByteArraySerializer())) {
      for (int i = 0; i < Integer.parseInt(o.get("--skus")); i++) {
        String sku = o.get("--sku-prefix") + "-" + i;
        for (Step step : service.checkout(sku)) {
          // Key: the SKU as UTF-8; the default partitioner hashes it with murmur2.
          acks.add(producer.send(new ProducerRecord<>(topic, sku, service.encode(sku, step.body))));
          sent.add(step);
        }
      }
      producer.flush();
      for (int i = 0; i < sent.size(); i++) {
        RecordMetadata m = acks.get(i).get();
        sent.get(i).partition = m.partition();
        sent.get(i).offset = m.offset();
      }
    }

    // The decisions: every partition of the outcomes topic from the start.
    Map<String, Step> waiting = new HashMap<>();
    for (Step s : sent) {
      waiting.put(s.partition + "@" + s.offset, s);
    }
    Properties consumerProps = new Properties();
    consumerProps.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, o.get("--brokers"));
    consumerProps.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
    long deadline = System.nanoTime() + Long.parseLong(o.get("--timeout")) * 1_000_000_000L;
    try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(
        consumerProps, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
      List<TopicPartition> partitions = consumer.partitionsFor(o.get("--outcomes-topic")).stream()
          .map(p -> new TopicPartition(p.topic(), p.partition()))
          .toList();
      consumer.assign(partitions);
      consumer.seekToBeginning(partitions);
      while (!waiting.isEmpty() && System.nanoTime() < deadline) {
        for (ConsumerRecord<byte[], byte[]> record : consumer.poll(Duration.ofMillis(500))) {
          GenericRecord outcome = service.decode(record.value());
          if (!outcome.get("topic").toString().equals(topic)) {
            continue;
          }
          Step step = waiting.remove(outcome.get("partition") + "@" + outcome.get("offset"));
          if (step != null) {
            step.outcome = outcome;
          }
        }
      }
    }
    if (!waiting.isEmpty()) {
      System.err.printf("%d of %d commands got no decision within %s s%n",
          waiting.size(), sent.size(), o.get("--timeout"));
      System.exit(1);
    }

    int wrong = 0;
    for (Step s : sent) {
      String result = s.outcome.get("result").toString();
      if (!result.equals(s.expected)) {
        wrong++;
        System.err.printf("%s %s %s: decided %s (%s), expected %s%n",
            s.sku, s.kind, s.body, result, s.outcome.get("reason"), s.expected);
      }
      System.out.printf("%s %s %s@%d %s%n", s.sku, s.kind, topic, s.partition, result);
    }
    System.err.printf("%d of %d commands decided as expected%n", sent.size() - wrong, sent.size());
    System.exit(wrong == 0 ? 0 : 1);
  }
}
