"""The SDK's gRPC side: channels, protobuf conversion and the calls themselves."""
