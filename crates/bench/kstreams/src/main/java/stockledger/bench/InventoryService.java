package stockledger.bench;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.stream.Stream;

import org.apache.avro.Schema;
import org.apache.avro.SchemaNormalization;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.BinaryDecoder;
import org.apache.avro.io.DecoderFactory;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.processor.api.RecordMetadata;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;

/**
 * An inventory service as a team on Kafka would write it: a Kafka Streams processor keyed by SKU
 * (the command topic's key), RocksDB state stores with their changelogs, and one decision written
 * per command record.
 *
 * <p>It reads the ledger's command topic, Avro single-object encoded (decoded by Apache Avro's own
 * library with the schemas of schemas/history/), and decides restocks, plain deducts and rollbacks
 * by the ledger's rules for those kinds: no oversell, a repeated order or adjustment id is a
 * repeat, a rollback before its deduct leaves a tombstone that refuses the late deduct. Each
 * decision goes to the outcomes topic keyed by SKU, as the text {@code "partition offset RESULT
 * delta available total"} naming the command record it decides. Any other command is answered
 * {@code UNSUPPORTED}, an undecodable record {@code INVALID}.
 *
 * <p>Prints {@code RUNNING} on standard output once the application runs (its partitions assigned
 * and its stores restored), and runs until it is stopped.
 */
public final class InventoryService {
  private static final byte[] MAGIC = {(byte) 0xC3, (byte) 0x01};
  /** The ledger's largest total stock. */
  private static final long MAX_STOCK = 1_000_000_000_000_000L;
  private static final byte DEDUCTED = 'D';
  private static final byte ROLLED_BACK = 'R';
  /** A rollback came first: the late deduct is refused. */
  private static final byte CANCELLED = 'C';

  /** Every released Command schema, by its CRC-64-AVRO fingerprint. */
  private final Map<Long, Schema> commands = new HashMap<>();

  private InventoryService(Path history) throws IOException {
    try (Stream<Path> files = Files.list(history)) {
      for (Path file : (Iterable<Path>) files::iterator) {
        String name = file.getFileName().toString();
        if (name.startsWith("Command.v") && name.endsWith(".avsc")) {
          Schema schema = new Schema.Parser().parse(file.toFile());
          commands.put(SchemaNormalization.parsingFingerprint64(schema), schema);
        }
      }
    }
    if (commands.isEmpty()) {
      throw new IOException("no Command.v*.avsc in " + history);
    }
  }

  /** Decides each command with the SKU's stock, orders and adjustments, all in RocksDB. */
  private final class Decide implements Processor<byte[], byte[], String, String> {
    private ProcessorContext<String, String> context;
    /** SKU -> available, total (two longs). */
    private KeyValueStore<String, byte[]> stock;
    /** SKU NUL order id -> status byte, quantity (a long). */
    private KeyValueStore<String, byte[]> orders;
    /** SKU NUL adjustment id -> nothing. */
    private KeyValueStore<String, byte[]> adjustments;
    /** A reader per writer schema, made once: resolving schemas is costly. */
    private final Map<Long, GenericDatumReader<GenericRecord>> readers = new HashMap<>();
    private BinaryDecoder decoder;

    private GenericRecord decode(byte[] payload) throws IOException {
      if (payload == null || payload.length < 10 || payload[0] != MAGIC[0]
          || payload[1] != MAGIC[1]) {
        throw new IOException("not Avro single-object encoding");
      }
      long fingerprint = ByteBuffer.wrap(payload, 2, 8).order(ByteOrder.LITTLE_ENDIAN).getLong();
      GenericDatumReader<GenericRecord> reader = readers.get(fingerprint);
      if (reader == null) {
        Schema writer = commands.get(fingerprint);
        if (writer == null) {
          throw new IOException(String.format("unknown command schema %016x", fingerprint));
        }
        reader = new GenericDatumReader<>(writer);
        readers.put(fingerprint, reader);
      }
      decoder = DecoderFactory.get().binaryDecoder(payload, 10, payload.length - 10, decoder);
      return reader.read(null, decoder);
    }

    @Override
    public void init(ProcessorContext<String, String> context) {
      this.context = context;
      stock = context.getStateStore("stock");
      orders = context.getStateStore("orders");
      adjustments = context.getStateStore("adjustments");
    }

    @Override
    public void process(Record<byte[], byte[]> record) {
      RecordMetadata at = context.recordMetadata().orElseThrow();
      String key = record.key() == null ? "" : new String(record.key(), StandardCharsets.UTF_8);
      String decision;
      try {
        GenericRecord command = decode(record.value());
        key = command.get("sku").toString();
        decision = decide(key, (GenericRecord) command.get("body"));
      } catch (IOException | RuntimeException e) {
        decision = "INVALID 0 0 0";
      }
      context.forward(record.withKey(key).withValue(at.partition() + " " + at.offset() + " "
          + decision));
    }

    private String decide(String sku, GenericRecord body) {
      byte[] held = stock.get(sku);
      long available = held == null ? 0 : ByteBuffer.wrap(held).getLong(0);
      long total = held == null ? 0 : ByteBuffer.wrap(held).getLong(8);
      String kind = body.getSchema().getName();
      switch (kind) {
        case "Deduct": {
          if (body.get("user_id") != null || body.get("expires_at") != null
              || body.get("basket_id") != null || body.get("location") != null
              || !((List<?>) body.get("units")).isEmpty()) {
            return "UNSUPPORTED 0 " + available + " " + total;
          }
          String order = sku + '\0' + body.get("order_id");
          long quantity = (Long) body.get("quantity");
          byte[] entry = orders.get(order);
          if (entry != null) {
            String result = entry[0] == DEDUCTED ? "DUPLICATE" : "REJECTED_CANCELLED";
            return result + " 0 " + available + " " + total;
          }
          if (quantity > available) {
            return "REJECTED_INSUFFICIENT 0 " + available + " " + total;
          }
          orders.put(order, entry(DEDUCTED, quantity));
          put(sku, available - quantity, total);
          return "APPLIED " + -quantity + " " + (available - quantity) + " " + total;
        }
        case "Rollback": {
          String order = sku + '\0' + body.get("order_id");
          byte[] entry = orders.get(order);
          if (entry == null) {
            orders.put(order, entry(CANCELLED, 0));
            return "IGNORED_NO_DEDUCTION 0 " + available + " " + total;
          }
          if (entry[0] != DEDUCTED) {
            return "DUPLICATE 0 " + available + " " + total;
          }
          long quantity = ByteBuffer.wrap(entry).getLong(1);
          orders.put(order, entry(ROLLED_BACK, quantity));
          put(sku, available + quantity, total);
          return "APPLIED " + quantity + " " + (available + quantity) + " " + total;
        }
        case "Restock": {
          if (body.get("location") != null || !((List<?>) body.get("units")).isEmpty()) {
            return "UNSUPPORTED 0 " + available + " " + total;
          }
          String adjustment = sku + '\0' + body.get("adjustment_id");
          if (adjustments.get(adjustment) != null) {
            return "DUPLICATE 0 " + available + " " + total;
          }
          long quantity = (Long) body.get("quantity");
          long nowAvailable;
          long nowTotal;
          if (body.get("mode").toString().equals("ADD")) {
            nowAvailable = available + quantity;
            nowTotal = total + quantity;
            if (nowAvailable < 0 || nowTotal > MAX_STOCK) {
              return "REJECTED_RESTOCK 0 " + available + " " + total;
            }
          } else {
            long heldByOrders = total - available;
            if (quantity < heldByOrders) {
              return "REJECTED_RESTOCK 0 " + available + " " + total;
            }
            nowAvailable = quantity - heldByOrders;
            nowTotal = quantity;
          }
          adjustments.put(adjustment, new byte[0]);
          put(sku, nowAvailable, nowTotal);
          return "APPLIED " + (nowAvailable - available) + " " + nowAvailable + " " + nowTotal;
        }
        default:
          return "UNSUPPORTED 0 " + available + " " + total;
      }
    }

    private void put(String sku, long available, long total) {
      stock.put(sku, ByteBuffer.allocate(16).putLong(available).putLong(total).array());
    }
  }

  private static byte[] entry(byte status, long quantity) {
    return ByteBuffer.allocate(9).put(status).putLong(quantity).array();
  }

  private Topology topology(String topic, String outcomes) {
    Topology topology = new Topology();
    topology.addSource("commands", Serdes.ByteArray().deserializer(),
        Serdes.ByteArray().deserializer(), topic);
    topology.addProcessor("decide", Decide::new, "commands");
    // Cached, as the DSL's stores are by default: reads of a recent key
    // come from memory, and a key written many times between commits goes
    // to RocksDB and its changelog once.
    for (String store : List.of("stock", "orders", "adjustments")) {
      topology.addStateStore(Stores.keyValueStoreBuilder(
          Stores.persistentKeyValueStore(store), Serdes.String(), Serdes.ByteArray())
          .withCachingEnabled(), "decide");
    }
    topology.addSink("outcomes", outcomes, Serdes.String().serializer(),
        Serdes.String().serializer(), "decide");
    return topology;
  }

  private static Map<String, String> options(String[] args) {
    Map<String, String> options = new HashMap<>();
    options.put("--brokers", "127.0.0.1:9092");
    options.put("--topic", "stock.ledger");
    options.put("--outcomes-topic", "stock.ledger.kstreams");
    options.put("--application-id", "stockledger-kstreams");
    options.put("--guarantee", StreamsConfig.EXACTLY_ONCE_V2);
    options.put("--state-dir", System.getProperty("java.io.tmpdir") + "/kstreams-inventory");
    options.put("--threads", String.valueOf(Runtime.getRuntime().availableProcessors()));
    options.put("--schemas", "schemas/history");
    for (int i = 0; i < args.length; i += 2) {
      if (!options.containsKey(args[i]) || i + 1 >= args.length) {
        System.err.println("usage: kstreams-inventory " + String.join(" ", options.keySet()
            .stream().sorted().map(k -> "[" + k + " VALUE]").toList()));
        System.exit(2);
      }
      options.put(args[i], args[i + 1]);
    }
    return options;
  }

  public static void main(String[] args) throws Exception {
    Map<String, String> o = options(args);
    InventoryService service = new InventoryService(Path.of(o.get("--schemas")));
    Properties props = new Properties();
    props.put(StreamsConfig.APPLICATION_ID_CONFIG, o.get("--application-id"));
    props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, o.get("--brokers"));
    props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, o.get("--guarantee"));
    props.put(StreamsConfig.STATE_DIR_CONFIG, o.get("--state-dir"));
    props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, Integer.parseInt(o.get("--threads")));
    props.put("consumer.auto.offset.reset", "earliest");
    // No global state here; set so that Kafka Streams does not warn of it.
    props.put("processing.exception.handler.global.enabled", true);
    KafkaStreams streams =
        new KafkaStreams(service.topology(o.get("--topic"), o.get("--outcomes-topic")), props);
    CountDownLatch stopped = new CountDownLatch(1);
    streams.setStateListener((now, before) -> {
      if (now == KafkaStreams.State.RUNNING) {
        System.out.println("RUNNING");
        System.out.flush();
      } else if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
        stopped.countDown();
      }
    });
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      streams.close();
      stopped.countDown();
    }));
    streams.start();
    stopped.await();
    streams.close();
    System.exit(streams.state() == KafkaStreams.State.ERROR ? 1 : 0);
  }
}
