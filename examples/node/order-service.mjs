// A small order service in Node.js, written only against what stockledger
// publishes: the schemas in schemas/history/ and the wire format in
// docs/producers.md ("Publishing from any language").
//
// For each of a few SKUs it runs one checkout (restock, hold, confirm, a
// plain order rolled back, a duplicate, a refusal), reads the applier's
// decisions from the outcomes topic, and exits 1 unless every decision is the
// one the ledger's rules give. @platformatic/kafka produces (idempotent,
// acks=all) and avsc encodes the values.
import { randomUUID } from 'node:crypto'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { parseArgs } from 'node:util'

import avro from 'avsc'
import {
  Consumer,
  ProduceAcks,
  Producer,
  compatibilityPartitioner,
  stringSerializer
} from '@platformatic/kafka'

const MAGIC = Buffer.from([0xc3, 0x01])

// CRC-64-AVRO, as the Avro specification defines it for schema fingerprints.
const EMPTY = 0xc15d213aa4d7a795n
const TABLE = Array.from({ length: 256 }, (_, i) => {
  let fp = BigInt(i)
  for (let j = 0; j < 8; j++) fp = (fp >> 1n) ^ (EMPTY & -(fp & 1n))
  return fp
})

/** The schema's CRC-64-AVRO fingerprint as framed: 8 bytes, little-endian. */
function fingerprint (type) {
  // avsc's getSchema() is the Parsing Canonical Form (logical types dropped).
  let fp = EMPTY
  for (const byte of Buffer.from(JSON.stringify(type.getSchema()), 'utf8')) {
    fp = (fp >> 8n) ^ TABLE[Number((fp ^ BigInt(byte)) & 0xffn)]
  }
  const out = Buffer.alloc(8)
  out.writeBigUInt64LE(fp)
  return out
}

/** Every released version of `subject` in `dir`, oldest first. */
function released (dir, subject) {
  const versions = readdirSync(dir)
    .filter(name => name.startsWith(`${subject}.v`) && name.endsWith('.avsc'))
    .map(name => [Number(name.slice(subject.length + 2, -5)), name])
    .sort((a, b) => a[0] - b[0])
  if (versions.length === 0) throw new Error(`no ${subject}.v*.avsc in ${dir}`)
  // Each version in a registry of its own: they name the same types.
  return versions.map(([, name]) =>
    avro.Type.forSchema(JSON.parse(readFileSync(join(dir, name), 'utf8')), { wrapUnions: true }))
}

/** One SKU's commands, in order, each with the decision it must get. */
function checkout (sku) {
  const deduct = (order, quantity) =>
    ({ order_id: order, quantity, user_id: null, expires_at: null })
  const step = (kind, body, fields, expected) => ({ sku, kind, body, fields, expected })
  return [
    step('RESTOCK', 'Restock', { adjustment_id: `${sku}-initial`, mode: 'SET', quantity: 5 }, 'APPLIED'),
    step('DEDUCT', 'Deduct', {
      ...deduct('o1', 2), user_id: { string: 'u1' }, expires_at: { long: Date.now() + 600_000 }
    }, 'APPLIED'),
    step('CONFIRM', 'Confirm', { order_id: 'o1' }, 'CONFIRMED'),
    step('DEDUCT', 'Deduct', deduct('o2', 2), 'APPLIED'),
    step('ROLLBACK', 'Rollback', { order_id: 'o2', reason: { string: 'payment failed' } }, 'APPLIED'),
    step('DEDUCT', 'Deduct', deduct('o3', 1), 'APPLIED'),
    step('DEDUCT', 'Deduct', deduct('o3', 1), 'DUPLICATE'),
    step('DEDUCT', 'Deduct', deduct('o4', 5), 'REJECTED_INSUFFICIENT')
  ]
}

async function main () {
  const { values: o } = parseArgs({
    options: {
      brokers: { type: 'string', default: process.env.KAFKA_BROKERS || '127.0.0.1:9092' },
      topic: { type: 'string', default: process.env.STOCKLEDGER_TOPIC || 'stock.ledger' },
      'outcomes-topic': {
        type: 'string', default: process.env.STOCKLEDGER_OUTCOMES_TOPIC || 'stock.ledger.outcomes'
      },
      schemas: { type: 'string', default: 'schemas/history' },
      'sku-prefix': { type: 'string', default: 'NODE' },
      skus: { type: 'string', default: '4' },
      timeout: { type: 'string', default: '60' }
    }
  })
  const commands = released(o.schemas, 'Command')
  const command = commands[commands.length - 1]
  const header = Buffer.concat([MAGIC, fingerprint(command)])
  const outcomeVersions = released(o.schemas, 'Outcome')
  const newestOutcome = outcomeVersions[outcomeVersions.length - 1]
  const resolvers = new Map(outcomeVersions.map(writer =>
    [fingerprint(writer).toString('hex'), newestOutcome.createResolver(writer)]))
  const bootstrapBrokers = o.brokers.split(',')

  const sent = new Map() // command id → step, in send order
  const messages = []
  for (let i = 0; i < Number(o.skus); i++) {
    const sku = `${o['sku-prefix']}-${i}`
    for (const step of checkout(sku)) {
      const id = randomUUID()
      const datum = command.toBuffer({
        command_id: id, sku, occurred_at: Date.now(), body: { [`stockledger.${step.body}`]: step.fields }
      })
      // Key: the SKU as UTF-8.
      messages.push({ topic: o.topic, key: sku, value: Buffer.concat([header, datum]) })
      sent.set(id, step)
    }
  }
  const producer = new Producer({
    clientId: 'stockledger-node-order-service',
    bootstrapBrokers,
    idempotent: true,
    acks: ProduceAcks.ALL,
    // The Java clients' partitioner, murmur2 of the key made positive with
    // & 0x7fffffff: the same partition per SKU as every other producer of the
    // ledger. This client's default partitioner (>>> 0) differs.
    partitioner: compatibilityPartitioner,
    serializers: { key: stringSerializer }
  })
  try {
    await producer.send({ messages })
  } finally {
    await producer.close()
  }

  // The decisions: the outcomes topic from the start, matched by command id.
  const waiting = new Set(sent.keys())
  const consumer = new Consumer({
    clientId: 'stockledger-node-order-service',
    groupId: `node-order-service-${randomUUID()}`,
    bootstrapBrokers
  })
  const stream = await consumer.consume({ topics: [o['outcomes-topic']], mode: 'earliest', autocommit: false })
  const timer = setTimeout(() => stream.close(), Number(o.timeout) * 1000)
  try {
    for await (const message of stream) {
      const v = message.value
      if (v.length < 10 || !v.subarray(0, 2).equals(MAGIC)) {
        throw new Error(`outcome at ${message.partition}@${message.offset}: not Avro single-object encoding`)
      }
      const resolver = resolvers.get(v.subarray(2, 10).toString('hex'))
      if (!resolver) throw new Error(`unknown outcome schema fingerprint ${v.subarray(2, 10).toString('hex')}`)
      const outcome = newestOutcome.fromBuffer(v.subarray(10), resolver)
      const id = outcome.command_id?.string
      if (outcome.topic !== o.topic || !waiting.has(id)) continue
      sent.get(id).outcome = outcome
      waiting.delete(id)
      if (waiting.size === 0) break
    }
  } finally {
    clearTimeout(timer)
    await stream.close()
    await consumer.close(true)
  }
  if (waiting.size > 0) {
    throw new Error(`${waiting.size} of ${sent.size} commands got no decision within ${o.timeout} s`)
  }

  let wrong = 0
  for (const step of sent.values()) {
    const { result, reason, partition } = step.outcome
    if (result !== step.expected) {
      wrong++
      console.error(`${step.sku} ${step.kind} ${JSON.stringify(step.fields)}: decided ${result} ` +
        `(${JSON.stringify(reason)}), expected ${step.expected}`)
    }
    console.log(`${step.sku} ${step.kind} ${o.topic}@${partition} ${result}`)
  }
  console.error(`${sent.size - wrong} of ${sent.size} commands decided as expected`)
  process.exitCode = wrong === 0 ? 0 : 1
}

main().catch(error => {
  console.error(`order service: ${error.message}`)
  process.exitCode = 1
})
