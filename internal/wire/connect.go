package wire

import "encoding/binary"

// Connect is the body of a CONNECT frame.
//
//	version u8 | flags uvarint | name str | lang str | client_version str | credentials str
type Connect struct {
	Version       uint8
	Flags         uint64 // Connect* bits
	Name          string // client name, shown in monitoring
	Lang          string // client library language
	ClientVersion string
	// Credentials is opaque to the codec (a token, "user:password", ...); servers that
	// do not check credentials ignore it.
	Credentials []byte
}

// Info is the body of an INFO frame.
//
//	version u8 | flags uvarint | server_id str | server_name str | server_version str |
//	client_id uvarint | max_payload uvarint | ping_interval_ms uvarint |
//	connect_url_count uvarint | connect_url str…
//
// connect_urls came after the first release of version 1: a body that ends after
// ping_interval_ms is a server that sends none.
type Info struct {
	Version        uint8
	Flags          uint64 // Info* bits
	ServerID       string
	ServerName     string
	ServerVersion  string
	ClientID       uint64
	MaxPayload     uint64
	PingIntervalMS uint64
	// ConnectURLs are the native URLs of the cluster's nodes (this one included), so
	// that a client given one node can move to the others. Each is non-empty.
	ConnectURLs []string
}

// AppendConnect appends a CONNECT frame.
func AppendConnect(dst []byte, c *Connect) []byte {
	n := 1 + uvarintLen(c.Flags) + strLen(c.Name) + strLen(c.Lang) + strLen(c.ClientVersion) + strLen(c.Credentials)
	dst = appendHead(dst, TypeConnect, n)
	dst = append(dst, c.Version)
	dst = binary.AppendUvarint(dst, c.Flags)
	dst = appendStr(dst, c.Name)
	dst = appendStr(dst, c.Lang)
	dst = appendStr(dst, c.ClientVersion)
	return appendStr(dst, c.Credentials)
}

// ParseConnect parses a CONNECT body (Frame.Payload). Fields appended by later protocol
// versions are ignored.
func ParseConnect(body []byte) (Connect, error) {
	r := reader{b: body}
	c := Connect{Version: r.byte(), Flags: r.uvarint()}
	c.Name = string(r.str())
	c.Lang = string(r.str())
	c.ClientVersion = string(r.str())
	c.Credentials = append([]byte(nil), r.str()...)
	if r.err != "" {
		f := Frame{Type: TypeConnect}
		return Connect{}, f.malformed("%s", r.err)
	}
	return c, nil
}

// AppendInfo appends an INFO frame.
func AppendInfo(dst []byte, in *Info) []byte {
	n := 1 + uvarintLen(in.Flags) + strLen(in.ServerID) + strLen(in.ServerName) + strLen(in.ServerVersion) +
		uvarintLen(in.ClientID) + uvarintLen(in.MaxPayload) + uvarintLen(in.PingIntervalMS) +
		uvarintLen(uint64(len(in.ConnectURLs)))
	for _, u := range in.ConnectURLs {
		n += strLen(u)
	}
	dst = appendHead(dst, TypeInfo, n)
	dst = append(dst, in.Version)
	dst = binary.AppendUvarint(dst, in.Flags)
	dst = appendStr(dst, in.ServerID)
	dst = appendStr(dst, in.ServerName)
	dst = appendStr(dst, in.ServerVersion)
	dst = binary.AppendUvarint(dst, in.ClientID)
	dst = binary.AppendUvarint(dst, in.MaxPayload)
	dst = binary.AppendUvarint(dst, in.PingIntervalMS)
	// The count is written even when it is 0, so that fields appended later have a
	// fixed place to start.
	dst = binary.AppendUvarint(dst, uint64(len(in.ConnectURLs)))
	for _, u := range in.ConnectURLs {
		dst = appendStr(dst, u)
	}
	return dst
}

// ParseInfo parses an INFO body (Frame.Payload). Fields appended by later protocol
// versions are ignored.
func ParseInfo(body []byte) (Info, error) {
	r := reader{b: body}
	in := Info{Version: r.byte(), Flags: r.uvarint()}
	in.ServerID = string(r.str())
	in.ServerName = string(r.str())
	in.ServerVersion = string(r.str())
	in.ClientID = r.uvarint()
	in.MaxPayload = r.uvarint()
	in.PingIntervalMS = r.uvarint()
	if r.err == "" && len(r.b) > 0 {
		in.ConnectURLs = r.urls("connect URL")
	}
	if r.err != "" {
		f := Frame{Type: TypeInfo}
		return Info{}, f.malformed("%s", r.err)
	}
	return in, nil
}
