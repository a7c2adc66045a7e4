//! The conformance kit on the `embedded` binder.

stream_tests::conformance_suite!(stream_tests::targets::Embedded);
