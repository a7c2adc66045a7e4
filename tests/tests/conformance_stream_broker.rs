//! The conformance kit on the `rabbit` binder against `stream-broker`, our broker on the
//! network (a server on a free loopback port per case): the third target beside `embedded`
//! and RabbitMQ.

stream_tests::conformance_suite!(stream_tests::targets::StreamBroker);
