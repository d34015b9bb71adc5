// Package watermill is a Watermill Pub/Sub (github.com/ThreeDotsLabs/watermill)
// backed by riverbus: Watermill's handlers, router, middleware and CQRS
// components run unchanged on riverbus's event log, with riverbus's
// contiguous delivery, pools, retries, dead letters and River UI underneath.
//
// It is a Go module of its own, so that riverbus itself does not depend on
// Watermill. Its package name, watermill, is also Watermill's own: import
// it under another name.
//
//	import rbw "github.com/riverbus/riverbus/watermill"
//
// # Mapping
//
//   - A topic is an event type. Publish appends each message as one event of
//     type topic: in a transaction of its own (NewPublisher), or in the
//     caller's (NewTxPublisher), so that the messages commit with the state
//     the caller changed, as watermill-sql's transactional publisher does.
//   - A consumer group is a pool per topic (PoolName: "group:topic"), which
//     gets every event of the topic once, whatever the number of its
//     subscribers; the Subscriber creates it on first use, from the beginning
//     of the topic (SubscriberConfig.Pool holds its settings: ordering,
//     attempts, retry schedule, start).
//   - A message is a River job. Subscribe runs a River client that works the
//     pool's queue and hands each job out as a message; Ack completes the
//     job, Nack fails it, so that it comes back on the pool's retry schedule
//     and, after its last attempt, is a dead letter (riverbus dlq, River
//     UI). A message not acknowledged within the job timeout
//     (SubscriberConfig.Work.JobTimeout) is retried the same way; one handed
//     out by a subscription that stops is given back without using an
//     attempt.
//   - The message's UUID, metadata and payload come back exactly as
//     published: the metadata whole under the event metadata's "watermill"
//     member, the payload as a JSON string when it is UTF-8 text, else in
//     base64 (PublisherConfig.Payload PayloadJSON stores a JSON payload as
//     the event's data instead, for riverbus's own consumers). Event returns
//     the riverbus event behind a message (sequence, key, tags, Late).
//   - The trace context of the published message's context (or of a
//     traceparent in its metadata) becomes the parent of the handler's
//     message context.
//
// Order: a pool created with bustype.OrderingKey hands out a key's messages
// one at a time in publish order (PublisherConfig.Key chooses the key);
// OrderingGlobal does so for the whole topic. Plain pools hand messages out in
// parallel. Delivery is at least once: a handler must be idempotent.
//
// The fan-out must run somewhere: SubscriberConfig.RunFanout, `riverbus run`,
// or any riverbus.Client started without FanoutDisabled.
package watermill
