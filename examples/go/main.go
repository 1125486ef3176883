// A small order service in Go, written only against what stockledger
// publishes: the schemas in schemas/history/ and the wire format in
// docs/producers.md ("Publishing from any language").
//
// For each of a few SKUs it runs one checkout (restock, hold, confirm, a
// plain order rolled back, a duplicate, a refusal), reads the applier's
// decisions from the outcomes topic, and exits 1 unless every decision is
// the one the ledger's rules give. franz-go produces with its default
// partitioner (murmur2 of the key, as the Java clients) and its default
// idempotent, acks=all settings; hamba/avro encodes the values.
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/kgo"
)

var magic = []byte{0xC3, 0x01}

// released reads every released version of subject in dir, oldest first.
func released(dir, subject string) ([]avro.Schema, error) {
	paths, err := filepath.Glob(filepath.Join(dir, subject+".v*.avsc"))
	if err != nil {
		return nil, err
	}
	version := func(p string) int {
		n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(p), subject+".v"), ".avsc"))
		return n
	}
	sort.Slice(paths, func(i, j int) bool { return version(paths[i]) < version(paths[j]) })
	var schemas []avro.Schema
	for _, p := range paths {
		text, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		// hamba/avro keeps logicalType in the text it fingerprints, which the
		// specification's Parsing Canonical Form drops; a logical type only
		// changes how Go values are typed, never the bytes, so parse the
		// schema without them and the fingerprint is the specification's.
		var tree any
		if err := json.Unmarshal(text, &tree); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		plain, _ := json.Marshal(withoutLogicalTypes(tree))
		schema, err := avro.ParseBytesWithCache(plain, "", &avro.SchemaCache{})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		schemas = append(schemas, schema)
	}
	if len(schemas) == 0 {
		return nil, fmt.Errorf("no %s.v*.avsc in %s", subject, dir)
	}
	return schemas, nil
}

func withoutLogicalTypes(node any) any {
	switch n := node.(type) {
	case map[string]any:
		delete(n, "logicalType")
		for k, v := range n {
			n[k] = withoutLogicalTypes(v)
		}
	case []any:
		for i, v := range n {
			n[i] = withoutLogicalTypes(v)
		}
	}
	return node
}

// fingerprint is the schema's CRC-64-AVRO fingerprint as framed: little-endian.
func fingerprint(s avro.Schema) []byte {
	f, err := s.FingerprintUsing(avro.CRC64AvroLE)
	if err != nil {
		panic(err)
	}
	return f
}

type step struct {
	sku, kind, body string
	fields          map[string]any
	expected        string
	partition       int32
	offset          int64
	outcome         map[string]any
}

// checkout is one SKU's commands, in order, each with the decision it must get.
func checkout(sku string) []*step {
	deduct := func(order string, quantity int64) map[string]any {
		return map[string]any{"order_id": order, "quantity": quantity, "user_id": nil, "expires_at": nil}
	}
	hold := deduct("o1", 2)
	hold["user_id"] = map[string]any{"string": "u1"}
	hold["expires_at"] = map[string]any{"long": time.Now().Add(10 * time.Minute).UnixMilli()}
	return []*step{
		{sku: sku, kind: "RESTOCK", body: "Restock", fields: map[string]any{
			"adjustment_id": sku + "-initial", "mode": "SET", "quantity": int64(5)}, expected: "APPLIED"},
		{sku: sku, kind: "DEDUCT", body: "Deduct", fields: hold, expected: "APPLIED"},
		{sku: sku, kind: "CONFIRM", body: "Confirm", fields: map[string]any{"order_id": "o1"}, expected: "CONFIRMED"},
		{sku: sku, kind: "DEDUCT", body: "Deduct", fields: deduct("o2", 2), expected: "APPLIED"},
		{sku: sku, kind: "ROLLBACK", body: "Rollback", fields: map[string]any{
			"order_id": "o2", "reason": map[string]any{"string": "payment failed"}}, expected: "APPLIED"},
		{sku: sku, kind: "DEDUCT", body: "Deduct", fields: deduct("o3", 1), expected: "APPLIED"},
		{sku: sku, kind: "DEDUCT", body: "Deduct", fields: deduct("o3", 1), expected: "DUPLICATE"},
		{sku: sku, kind: "DEDUCT", body: "Deduct", fields: deduct("o4", 5), expected: "REJECTED_INSUFFICIENT"},
	}
}

func env(name, otherwise string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return otherwise
}

func main() {
	brokers := flag.String("brokers", env("KAFKA_BROKERS", "127.0.0.1:9092"), "Kafka bootstrap servers")
	topic := flag.String("topic", env("STOCKLEDGER_TOPIC", "stock.ledger"), "the command topic")
	outcomesTopic := flag.String("outcomes-topic", env("STOCKLEDGER_OUTCOMES_TOPIC", "stock.ledger.outcomes"), "the outcomes topic")
	schemas := flag.String("schemas", "schemas/history", "the released schemas")
	prefix := flag.String("sku-prefix", "GO", "SKUs are PREFIX-0, PREFIX-1, …")
	skus := flag.Int("skus", 4, "how many SKUs to check out")
	timeout := flag.Duration("timeout", 60*time.Second, "how long to wait for the decisions")
	flag.Parse()
	if err := run(*brokers, *topic, *outcomesTopic, *schemas, *prefix, *skus, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "order service:", err)
		os.Exit(1)
	}
}

func run(brokers, topic, outcomesTopic, schemaDir, prefix string, skus int, timeout time.Duration) error {
	commands, err := released(schemaDir, "Command")
	if err != nil {
		return err
	}
	command := commands[len(commands)-1]
	header := append(append([]byte{}, magic...), fingerprint(command)...)
	outcomeVersions, err := released(schemaDir, "Outcome")
	if err != nil {
		return err
	}
	outcomes := map[string]avro.Schema{}
	for _, s := range outcomeVersions {
		outcomes[string(fingerprint(s))] = s
	}

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	producer, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...))
	if err != nil {
		return err
	}
	var sent []*step
	var records []*kgo.Record
	for i := 0; i < skus; i++ {
		sku := fmt.Sprintf("%s-%d", prefix, i)
		for _, s := range checkout(sku) {
			datum, err := avro.Marshal(command, map[string]any{
				"command_id":  fmt.Sprintf("go-%d-%s-%d", time.Now().UnixNano(), sku, len(sent)),
				"sku":         sku,
				"occurred_at": time.Now().UnixMilli(),
				"body":        map[string]any{"stockledger." + s.body: s.fields},
			})
			if err != nil {
				return fmt.Errorf("encoding %s %s: %w", sku, s.kind, err)
			}
			// Key: the SKU as UTF-8; the default partitioner hashes it with murmur2.
			records = append(records, &kgo.Record{Topic: topic, Key: []byte(sku), Value: append(append([]byte{}, header...), datum...)})
			sent = append(sent, s)
		}
	}
	results := producer.ProduceSync(ctx, records...)
	producer.Close()
	if err := results.FirstErr(); err != nil {
		return fmt.Errorf("not every command was delivered: %w", err)
	}
	waiting := map[[2]int64]*step{}
	for i, r := range results {
		sent[i].partition, sent[i].offset = r.Record.Partition, r.Record.Offset
		waiting[[2]int64{int64(r.Record.Partition), r.Record.Offset}] = sent[i]
	}

	// The decisions: every partition of the outcomes topic from the start.
	consumer, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...),
		kgo.ConsumeTopics(outcomesTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer consumer.Close()
	for len(waiting) > 0 && ctx.Err() == nil {
		fetches := consumer.PollFetches(ctx)
		for _, e := range fetches.Errors() {
			if e.Err != context.DeadlineExceeded {
				return fmt.Errorf("reading outcomes: %w", e.Err)
			}
		}
		var failure error
		fetches.EachRecord(func(r *kgo.Record) {
			if failure != nil {
				return
			}
			v := r.Value
			if len(v) < 10 || !bytes.Equal(v[:2], magic) {
				failure = fmt.Errorf("outcome at %d@%d: not Avro single-object encoding", r.Partition, r.Offset)
				return
			}
			writer, ok := outcomes[string(v[2:10])]
			if !ok {
				failure = fmt.Errorf("unknown outcome schema fingerprint %016x", binary.LittleEndian.Uint64(v[2:10]))
				return
			}
			var outcome map[string]any
			if err := avro.Unmarshal(writer, v[10:], &outcome); err != nil {
				failure = err
				return
			}
			if outcome["topic"] != topic {
				return
			}
			key := [2]int64{int64(outcome["partition"].(int)), outcome["offset"].(int64)}
			if s, ok := waiting[key]; ok {
				s.outcome = outcome
				delete(waiting, key)
			}
		})
		if failure != nil {
			return failure
		}
	}
	if len(waiting) > 0 {
		return fmt.Errorf("%d of %d commands got no decision within %s", len(waiting), len(sent), timeout)
	}

	wrong := 0
	for _, s := range sent {
		result := s.outcome["result"]
		if result != s.expected {
			wrong++
			fmt.Fprintf(os.Stderr, "%s %s %v: decided %v (%v), expected %s\n", s.sku, s.kind, s.fields, result, s.outcome["reason"], s.expected)
		}
		fmt.Printf("%s %s %s@%d %v\n", s.sku, s.kind, topic, s.partition, result)
	}
	fmt.Fprintf(os.Stderr, "%d of %d commands decided as expected\n", len(sent)-wrong, len(sent))
	if wrong > 0 {
		os.Exit(1)
	}
	return nil
}
