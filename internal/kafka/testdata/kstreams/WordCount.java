// WordCount is a Kafka Streams application that counts the words of an input
// topic in a state store, so Streams keeps the counts in a compacted changelog
// topic and restores them from it when its local state is gone. The Kafka API
// tests run it as a single-file source program:
//
//   java -cp 'libs/*' WordCount.java <bootstrap> <application id> <state dir> <input> <output>
//
// It prints each state change of the application and stops when its standard
// input closes.
import java.time.Duration;
import java.util.Arrays;
import java.util.Properties;

import org.apache.kafka.common.config.TopicConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.CloseOptions;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Materialized;

public class WordCount {
    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        p.put(StreamsConfig.STATE_DIR_CONFIG, args[2]);
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        // Every update of a count goes to the changelog and the output.
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        // Small segments for the internal topics, so that the broker compacts
        // the changelog while the test runs.
        p.put(StreamsConfig.topicPrefix(TopicConfig.SEGMENT_BYTES_CONFIG), 4096);

        StreamsBuilder b = new StreamsBuilder();
        b.<String, String>stream(args[3])
            .flatMapValues(line -> Arrays.asList(line.toLowerCase().split("\\W+")))
            .filter((k, word) -> !word.isEmpty())
            .groupBy((k, word) -> word)
            .count(Materialized.as("counts"))
            .toStream()
            .mapValues(n -> Long.toString(n))
            .to(args[4]);

        KafkaStreams streams = new KafkaStreams(b.build(), p);
        streams.setStateListener((now, before) -> {
            System.out.println("state " + now);
            System.out.flush();
        });
        streams.start();
        while (System.in.read() != -1) {
        }
        // Leaving the group lets the next run's member take the tasks at once
        // rather than after this one's session timeout.
        streams.close(CloseOptions.groupMembershipOperation(CloseOptions.GroupMembershipOperation.LEAVE_GROUP)
            .withTimeout(Duration.ofSeconds(30)));
        System.out.println("closed");
    }
}
