//! Wire codec: Kafka framing, request/response headers, error codes, record-batch validation.
