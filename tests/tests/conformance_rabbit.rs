//! The conformance kit on the `rabbit` binder (skipped, with the reason printed, until the
//! binder exists).

stream_tests::conformance_suite!(stream_tests::targets::Rabbit);
