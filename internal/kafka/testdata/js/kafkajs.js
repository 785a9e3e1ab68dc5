// kafkajs against Tern, run by TestKafkajs (internal/kafka/kafkajs_test.go) as
// `node kafkajs.js` in this directory with BROKER=host:port. It drives kafkajs's
// admin client and producers and prints one JSON object (stdout, last line) with
// what they answered; the Go test checks it, and reads the produced records back
// with franz-go.
//
// kafkajs's consumers all belong to a consumer group (it has no assign()), so this
// script does not consume.
const { Kafka, CompressionTypes, logLevel } = require('kafkajs');

const broker = process.env.BROKER;
const perTopic = 50;
// The timestamp of record i: fixed, so that the Go test can check each record's.
const baseTime = 1700000000000;

// Every log line to stderr, so that stdout holds only the result.
const logCreator = () => ({ namespace, level, log }) => {
	const { message, ...extra } = log;
	process.stderr.write(`kafkajs ${namespace} level ${level}: ${message} ${JSON.stringify(extra)}\n`);
};

const kafka = new Kafka({
	clientId: 'tern-kafkajs-test',
	brokers: [broker],
	connectionTimeout: 5000,
	requestTimeout: 10000,
	retry: { retries: 3, initialRetryTime: 100, maxRetryTime: 1000 },
	logLevel: logLevel.WARN,
	logCreator,
});

// records: perTopic keyed records with headers, for topic.
function records(topic) {
	const out = [];
	for (let i = 0; i < perTopic; i++) {
		out.push({
			key: `key-${i % 5}`,
			value: `${topic} record ${i}: compressible compressible compressible`,
			timestamp: String(baseTime + i),
			headers: { seq: String(i), origin: 'kafkajs' },
		});
	}
	return out;
}

// offsets flattens a send's answer to [{partition, baseOffset, errorCode}].
function offsets(answer) {
	return answer.map((r) => ({ topic: r.topicName, partition: r.partition, baseOffset: Number(r.baseOffset), errorCode: r.errorCode }));
}

async function main() {
	const result = {};
	const admin = kafka.admin();
	await admin.connect();
	// CreateTopics: a topic of 3 partitions with a retention, and a scratch one to delete.
	result.created = await admin.createTopics({
		waitForLeaders: true,
		topics: [
			{ topic: 'js-admin', numPartitions: 3, configEntries: [{ name: 'retention.ms', value: '3600000' }] },
			{ topic: 'js-scratch', numPartitions: 1 },
			{ topic: 'js-gzip', numPartitions: 1 },
		],
	});
	// Again: kafkajs answers false for a topic that exists already.
	result.createdAgain = await admin.createTopics({ topics: [{ topic: 'js-admin', numPartitions: 3 }] });
	const meta = await admin.fetchTopicMetadata({ topics: ['js-admin'] });
	result.adminPartitions = meta.topics[0].partitions.map((p) => ({ partition: p.partitionId, leader: p.leader })).sort((a, b) => a.partition - b.partition);
	await admin.deleteTopics({ topics: ['js-scratch'], timeout: 5000 });

	// Produce: with each codec kafkajs has built in (none, gzip), acks=all, to an
	// auto-created topic (js-none) and to one admin made (js-gzip); and with an
	// idempotent producer (js-idempotent, auto-created).
	const producer = kafka.producer({ allowAutoTopicCreation: true });
	await producer.connect();
	result.produced = {};
	for (const [topic, compression] of [['js-none', CompressionTypes.None], ['js-gzip', CompressionTypes.GZIP]]) {
		const first = await producer.send({ topic, compression, acks: -1, messages: records(topic).slice(0, perTopic / 2) });
		const rest = await producer.send({ topic, compression, acks: -1, messages: records(topic).slice(perTopic / 2) });
		result.produced[topic] = offsets(first).concat(offsets(rest));
	}
	await producer.disconnect();
	const idem = kafka.producer({ idempotent: true, maxInFlightRequests: 1, allowAutoTopicCreation: true });
	await idem.connect();
	result.produced['js-idempotent'] = offsets(await idem.send({ topic: 'js-idempotent', messages: records('js-idempotent') }));
	await idem.disconnect();

	// ListOffsets through the admin client, and the topics Metadata lists now.
	result.offsets = {};
	for (const topic of ['js-none', 'js-gzip', 'js-idempotent', 'js-admin']) {
		result.offsets[topic] = (await admin.fetchTopicOffsets(topic))
			.map((o) => ({ partition: o.partition, low: Number(o.low), high: Number(o.high) }))
			.sort((a, b) => a.partition - b.partition);
	}
	result.topics = (await admin.listTopics()).sort();
	await admin.disconnect();
	process.stdout.write(JSON.stringify(result) + '\n');
}

const timer = setTimeout(() => {
	process.stderr.write('kafkajs.js: timed out after 45 s\n');
	process.exit(2);
}, 45000);
main().then(
	() => {
		clearTimeout(timer);
		process.exit(0);
	},
	(err) => {
		process.stderr.write(`kafkajs.js: ${err.stack || err}\n${JSON.stringify(err)}\n`);
		process.exit(1);
	},
);
