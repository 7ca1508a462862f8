package main

import (
	"fmt"
	"io"
	"time"
)

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

func (r *results) write(w io.Writer, c config) {
	storage := "file"
	if c.memory {
		storage = "memory"
	}
	fmt.Fprintf(w, "%d entries of %d bytes over %d services, %s storage, one embedded nats-server. "+
		"Publish rates are the median of %d rounds into fresh streams; lookups the median of %d runs.\n\n",
		c.entries, r.payload, c.services, storage, c.rounds, c.runs)
	fmt.Fprintf(w, "Host before: %s; after: %s.\n\n", r.host[0], r.host[1])
	fmt.Fprintln(w, "| measure | switchboard jetstream | NATS KV, same work | goal | |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	fmt.Fprintf(w, "| publish (Apply: validate, encode, async publish, all acks) | %.0f entries/s | Put sequential %.0f/s; async publish %.0f/s (payloads pre-encoded: %.0f/s) | ≥ 0.8× async KV: %.2f× (%.2f× of pre-encoded) | %s |\n",
		r.pubOurs, r.pubKVPut, r.pubKVAsync, r.pubKVPre, r.pubOurs/r.pubKVAsync, r.pubOurs/r.pubKVPre, verdict(r.pubOurs >= 0.8*r.pubKVAsync))
	fmt.Fprintf(w, "| publish, KV async with the header ours carry (the spec's Nats-Rollup) | | %.0f/s | (what the header costs: ours is %.2f× of this) | |\n",
		r.pubKVHdr, r.pubOurs/r.pubKVHdr)
	fmt.Fprintf(w, "| full lookup (List, consumer; decoded, validated, sorted; repeated) | %s | WatchAll initial %s (decoding too: %s); ListKeys+Get %s | ≤ 1.2× WatchAll: %.2f×; ≥ 5× faster than ListKeys+Get: %.1f× | %s |\n",
		ms(r.fullOurs), ms(r.fullKVWatch), ms(r.fullKVWatchDecode), ms(r.fullKVList),
		r.fullOurs.Seconds()/r.fullKVWatch.Seconds(), r.fullKVList.Seconds()/r.fullOurs.Seconds(),
		verdict(r.fullOurs.Seconds() <= 1.2*r.fullKVWatch.Seconds() && r.fullKVList.Seconds() >= 5*r.fullOurs.Seconds()))
	fmt.Fprintf(w, "| full lookup, cold (first List of a new Registry: every payload decoded) | %s | | ≤ 1.2× WatchAll: %.2f× | %s |\n",
		ms(r.fullCold), r.fullCold.Seconds()/r.fullKVWatch.Seconds(), verdict(r.fullCold.Seconds() <= 1.2*r.fullKVWatch.Seconds()))
	fmt.Fprintf(w, "| full lookup, KV WatchAll of the bucket written with the header ours carry | | %s | (what the header costs a reader: repeated %.2f×, cold %.2f× of this) | |\n",
		ms(r.fullKVWatchHdr), r.fullOurs.Seconds()/r.fullKVWatchHdr.Seconds(), r.fullCold.Seconds()/r.fullKVWatchHdr.Seconds())
	fmt.Fprintf(w, "| full lookup (List, --lookup direct: direct get by sequence) | %s | | alternative strategy | |\n", ms(r.fullDirect))
	fmt.Fprintf(w, "| one-service lookup (default: multi_last checked against the leader) | %s | CCM's lookup (multi_last, encoding/json) %s; KV watch of the service %s | ≤ 1.0× CCM: %.2f× | %s |\n",
		ms(r.oneOurs), ms(r.oneCCM), ms(r.oneKVWatch), r.oneOurs.Seconds()/r.oneCCM.Seconds(), verdict(r.oneOurs <= r.oneCCM))
	fmt.Fprintf(w, "| one-service lookup (--lookup direct: multi_last, any replica) | %s | | ≤ 1.0× CCM: %.2f× | %s |\n",
		ms(r.oneDirect), r.oneDirect.Seconds()/r.oneCCM.Seconds(), verdict(r.oneDirect <= r.oneCCM))
	fmt.Fprintf(w, "| initial watch delivery (Watch to Synced) | %s | WatchAll initial %s | | |\n", ms(r.watchOurs), ms(r.fullKVWatch))
	fmt.Fprintf(w, "\nProcess CPU per full lookup (client and embedded server, median): repeated %s, cold %s, bare WatchAll %s (%.2f×, %.2f×).\n",
		ms(r.cpuOurs), ms(r.cpuCold), ms(r.cpuKVWatch), r.cpuOurs.Seconds()/r.cpuKVWatch.Seconds(), r.cpuCold.Seconds()/r.cpuKVWatch.Seconds())
}
