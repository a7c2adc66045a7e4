//! The conformance kit on the `rabbit` binder, against the RabbitMQ at `AMQP_URL`. Without a
//! broker the cases are skipped with the reason printed, unless `REQUIRE_RABBIT=1`.

stream_tests::conformance_suite!(stream_tests::targets::Rabbit);
