//! The conformance kit on the channel binder: a binder with no exchanges or queues runs
//! every case that does not need an AMQP broker.

stream_tests::conformance_suite!(stream_tests::targets::Channels);
