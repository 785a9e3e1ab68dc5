# Apache Kafka for the bench scripts, sourced after bench/lib.sh (from the repository
# root): installing its jars from Maven Central, and starting and stopping a cluster
# of KRaft brokers on loopback. Nothing here runs when the file is sourced.
#
#   kafka_install                 the jars into bench/.tools/kafka-$KAFKA_VERSION/libs,
#                                 unless they are there already, and a Java 17 JDK
#                                 unless java on PATH is a JDK 17 or newer (then a no-op);
#                                 scripts/deps.sh uses it too, for the Kafka API tests
#   kafka_start_cluster DIR LOGS  format and start KAFKA_NODES brokers, each also a
#                                 controller of the KRaft quorum, data in DIR, logs and
#                                 configs in LOGS; their pids in KAFKA_PIDS
#   kafka_stop_cluster            stop exactly those pids (TERM all, then KILL after 60 s)
#   kafka_java ARGS...            java with the jars on the class path and the tools'
#                                 JVM options (quiet logging to stderr)
#
# Environment: KAFKA_BASE (29100): node i listens for clients on KAFKA_BASE+10i and
# for the controller quorum on KAFKA_BASE+10i+1; KAFKA_HEAP ("-Xmx1G -Xms1G") each
# broker's heap, as Kafka's kafka-server-start.sh sets it. KAFKA_NODES (3) may be set
# (also between two clusters) to 1: a single broker, whose internal topics and
# default replication factor are 1 and min.insync.replicas 1; with 3 or more the
# defaults are replication factor 3 and min.insync.replicas 2.
#
# Kafka's release tarball is not fetched: the jars come from Maven Central through
# `mvn dependency:copy-dependencies` (kafka_2.13, kafka-tools, kafka-storage and
# kafka-streams, and log4j-slf4j-impl so that the SLF4J 1.x API Kafka logs through
# reaches log4j 2).

KAFKA_VERSION=4.4.0
# The SLF4J binding's version is the log4j-core that kafka_2.13 4.4.0 depends on.
KAFKA_LOG4J_VERSION=2.25.5
KAFKA_HOME=$PWD/bench/.tools/kafka-$KAFKA_VERSION
KAFKA_LIBS=$KAFKA_HOME/libs
KAFKA_M2=$PWD/bench/.tools/m2 # Maven's cache for this, not ~/.m2
KAFKA_BASE=${KAFKA_BASE:-29100}
KAFKA_NODES=${KAFKA_NODES:-3}
KAFKA_HEAP=${KAFKA_HEAP:-"-Xmx1G -Xms1G"}
# What Kafka's own scripts give every JVM (kafka-run-class.sh's
# KAFKA_JVM_PERFORMANCE_OPTS); the locale keeps the tools' decimal points dots.
KAFKA_JVM_OPTS=(-server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35
	-XX:+ExplicitGCInvokesConcurrent -XX:MaxInlineLevel=15 -Djava.awt.headless=true -Duser.language=en -Duser.country=US)
KAFKA_PIDS=()

kafka_port() { echo $((KAFKA_BASE + 10 * $1)); }                # node: client listener
kafka_controller_port() { echo $((KAFKA_BASE + 10 * $1 + 1)); } # node: KRaft quorum
kafka_bootstrap() {
	local i out=""
	for i in $(seq 1 "$KAFKA_NODES"); do out+="127.0.0.1:$(kafka_port "$i"),"; done
	echo "${out%,}"
}
kafka_ports() {
	local i
	for i in $(seq 1 "$KAFKA_NODES"); do echo "$(kafka_port "$i") $(kafka_controller_port "$i")"; done
}

# The major version of the java on PATH (0 if there is none): "1.8.0_x" is 8, "17.0.15" is 17.
kafka_java_major() {
	command -v java >/dev/null 2>&1 || { echo 0; return; }
	java -version 2>&1 | awk -F'"' 'NR == 1 { split($2, v, "."); print (v[1] == "1" ? v[2] : v[1]) + 0; exit }'
}

kafka_install() {
	local marker=$KAFKA_LIBS/.installed want="kafka $KAFKA_VERSION kafka-streams log4j-slf4j-impl $KAFKA_LOG4J_VERSION"
	# Kafka 4's brokers and tools need Java 17 or newer; the Kafka API tests
	# run a Kafka Streams application as a single-file source program, which
	# needs the JDK's compiler module.
	if [ "$(kafka_java_major)" -lt 17 ] || ! java --list-modules 2>/dev/null | grep -q '^jdk\.compiler@'; then
		echo "== installing a Java 17 JDK for Kafka" >&2
		apt_install openjdk-17-jdk-headless
		if [ "$(kafka_java_major)" -lt 17 ]; then
			echo "$BENCH: java on PATH is still older than 17 ($(command -v java)); select Java 17 (update-alternatives --config java)" >&2
			return 1
		fi
	fi
	if [ -f "$marker" ] && [ "$(cat "$marker")" = "$want" ]; then
		return 0
	fi
	command -v mvn >/dev/null 2>&1 || { echo "== installing maven (to fetch Kafka's jars)" >&2; apt_install maven; }
	echo "== fetching Apache Kafka $KAFKA_VERSION's jars from Maven Central into ${KAFKA_LIBS#"$PWD"/}" >&2
	mkdir -p "$KAFKA_HOME"
	cat >"$KAFKA_HOME/pom.xml" <<-EOF
		<project xmlns="http://maven.apache.org/POM/4.0.0">
		  <modelVersion>4.0.0</modelVersion>
		  <groupId>local.bench</groupId>
		  <artifactId>kafka-fetch</artifactId>
		  <version>1</version>
		  <packaging>pom</packaging>
		  <dependencies>
		    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$KAFKA_VERSION</version></dependency>
		    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>$KAFKA_VERSION</version></dependency>
		    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-storage</artifactId><version>$KAFKA_VERSION</version></dependency>
		    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-streams</artifactId><version>$KAFKA_VERSION</version></dependency>
		    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>$KAFKA_LOG4J_VERSION</version></dependency>
		  </dependencies>
		</project>
	EOF
	rm -rf "$KAFKA_LIBS.tmp"
	if ! mvn -B -q -f "$KAFKA_HOME/pom.xml" -Dmaven.repo.local="$KAFKA_M2" \
		org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
		-DincludeScope=runtime -DoutputDirectory="$KAFKA_LIBS.tmp" >&2; then
		echo "$BENCH: fetching Kafka's jars with Maven failed (see above)" >&2
		rm -rf "$KAFKA_LIBS.tmp"
		return 1
	fi
	rm -rf "$KAFKA_LIBS"
	mv "$KAFKA_LIBS.tmp" "$KAFKA_LIBS"
	echo "$want" >"$marker"
}

# kafka_log4j FILE LEVEL TARGET: a log4j 2 configuration logging LEVEL and above to
# TARGET (SYSTEM_OUT, SYSTEM_ERR), without the configuration dumps every client and
# server logs at INFO.
kafka_log4j() {
	cat >"$1" <<-EOF
		status = warn
		appender.console.type = Console
		appender.console.name = CONSOLE
		appender.console.target = $3
		appender.console.layout.type = PatternLayout
		appender.console.layout.pattern = [%d] %p %m (%c)%n
		rootLogger.level = $2
		rootLogger.appenderRef.console.ref = CONSOLE
		logger.config.name = org.apache.kafka.common.config.AbstractConfig
		logger.config.level = WARN
	EOF
}

KAFKA_TOOLS_LOG4J=
kafka_java() { # args...: java with the jars and the tools' options (-Xmx512M, as Kafka's perf-test scripts)
	java -Xmx512M "${KAFKA_JVM_OPTS[@]}" -Dlog4j2.configurationFile="$KAFKA_TOOLS_LOG4J" -cp "$KAFKA_LIBS/*" "$@"
}

kafka_start_cluster() { # data-dir logs-dir
	local dir=$1 logs=$2 i voters="" cid conf rf=3 isr=2
	[ "$KAFKA_NODES" -ge 3 ] || rf=1 isr=1
	mkdir -p "$dir" "$logs"
	KAFKA_TOOLS_LOG4J=$dir/log4j2-tools.properties
	kafka_log4j "$KAFKA_TOOLS_LOG4J" WARN SYSTEM_ERR
	kafka_log4j "$dir/log4j2-broker.properties" INFO SYSTEM_OUT
	for i in $(seq 1 "$KAFKA_NODES"); do voters+="$i@127.0.0.1:$(kafka_controller_port "$i"),"; done
	cid=$(kafka_java kafka.tools.StorageTool random-uuid | tail -1)
	for i in $(seq 1 "$KAFKA_NODES"); do
		conf=$logs/kafka-n$i.properties
		# Kafka's defaults otherwise (log.flush.* unset: no fsync on the produce path,
		# durability by replication; num.network.threads 3, num.io.threads 8, ...).
		cat >"$conf" <<-EOF
			process.roles=broker,controller
			node.id=$i
			controller.quorum.voters=${voters%,}
			listeners=PLAINTEXT://127.0.0.1:$(kafka_port "$i"),CONTROLLER://127.0.0.1:$(kafka_controller_port "$i")
			advertised.listeners=PLAINTEXT://127.0.0.1:$(kafka_port "$i")
			controller.listener.names=CONTROLLER
			inter.broker.listener.name=PLAINTEXT
			listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
			log.dirs=$dir/n$i
			default.replication.factor=$rf
			min.insync.replicas=$isr
			offsets.topic.replication.factor=$rf
			transaction.state.log.replication.factor=$rf
			transaction.state.log.min.isr=$isr
			auto.create.topics.enable=false
			group.initial.rebalance.delay.ms=0
		EOF
		kafka_java kafka.tools.StorageTool format -t "$cid" -c "$conf" >"$logs/kafka-n$i-format.log" 2>&1 || {
			echo "$BENCH: formatting Kafka node $i's storage failed; see $logs/kafka-n$i-format.log" >&2
			return 1
		}
	done
	for i in $(seq 1 "$KAFKA_NODES"); do
		# shellcheck disable=SC2086 # KAFKA_HEAP is a list of options
		java $KAFKA_HEAP "${KAFKA_JVM_OPTS[@]}" -Dlog4j2.configurationFile="$dir/log4j2-broker.properties" \
			-cp "$KAFKA_LIBS/*" kafka.Kafka "$logs/kafka-n$i.properties" >"$logs/kafka-n$i.log" 2>&1 &
		KAFKA_PIDS+=($!)
	done
	for i in $(seq 1 "$KAFKA_NODES"); do
		wait_port "$(kafka_port "$i")" "${KAFKA_PIDS[$((i - 1))]}" "Kafka node $i" 90 || return 1
	done
}

kafka_stop_cluster() {
	local pid
	# All at once: a broker stopped last would otherwise wait for controllers that
	# are already gone.
	for pid in "${KAFKA_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	for pid in "${KAFKA_PIDS[@]}"; do stop_pid "$pid" "Kafka broker" 60; done
	KAFKA_PIDS=()
}
