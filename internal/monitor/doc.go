// Package monitor serves the broker's HTTP monitoring endpoint: health, a status
// snapshot, the list of client connections, the cluster view and Prometheus
// metrics. It listens on port 7480 by default (DefaultPort); the caller chooses the
// address.
//
// The package owns the monitoring types (Status, ConnInfo), the Source interface the
// broker implements to feed them, the HTTP handlers and a Prometheus registry of its
// own. It imports no broker or protocol package: everything it reports comes through
// Source, so the endpoint can be tested, and embedded, without a running broker.
//
// # Endpoints
//
// All endpoints answer GET (and HEAD); any other method gets 405 Method Not Allowed
// with an Allow header, and an unknown path gets 404 Not Found.
//
//	/             plain-text index of the endpoints below
//	/healthz      {"status":"ok"} with 200 while the endpoint is serving
//	/status       Status as indented JSON; Uptime is computed here from Start and Now
//	/connections  {"now", "total", "offset", "limit", "connections"}: ConnInfo values
//	              sorted by ID, paged with ?limit=N (default 1024) and ?offset=M
//	              (default 0); a malformed or negative value gets 400 Bad Request
//	/cluster      ClusterSource.Cluster as indented JSON; 404 when the source is no
//	              ClusterSource or runs alone
//	/metrics      Prometheus text exposition format
//
// # Metrics
//
// The collector asks Source.Status once per scrape and reports:
//
//	tern_connections             gauge    client connections currently open
//	tern_connections_total       counter  client connections accepted since start
//	tern_subscriptions           gauge    subscriptions currently registered
//	tern_in_messages_total       counter  messages received from clients
//	tern_out_messages_total      counter  messages delivered to clients
//	tern_in_bytes_total          counter  payload bytes received from clients
//	tern_out_bytes_total         counter  payload bytes delivered to clients
//	tern_slow_consumers_total    counter  connections or subscribers that hit their
//	                                      pending limit
//	tern_dropped_messages_total  counter  messages dropped by the slow-consumer drop
//	                                      policy
//	tern_info                    gauge    always 1; labels version, server_id,
//	                                      server_name
//	tern_uptime_seconds          gauge    seconds since the server started
//
// A ClusterSource that is a cluster node adds, from one ClusterStats per scrape,
// tern_cluster_members, tern_cluster_routes, tern_cluster_local_interest and
// tern_route_auth_failures_total (routes refused for the cluster secret or for TLS), and per
// route, labelled node (the other node's name), tern_route_{in,out}_{msgs,bytes}_total,
// tern_route_dropped_msgs_total, tern_route_rtt_seconds (once measured),
// tern_route_pending_bytes, tern_route_unacked_msgs, tern_route_interest,
// tern_route_excluded, tern_route_exclusions_total and
// tern_route_excluded_drops_total. The
// monitor knows the cluster only through these types, never its packages.
//
// The same registry holds the Go runtime (go_*) and process (process_*) collectors.
// Other subsystems add their own collectors through Server.Registry; the global
// default registry of client_golang is never used.
package monitor
