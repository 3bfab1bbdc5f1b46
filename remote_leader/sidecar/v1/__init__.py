"""Generated protobuf/gRPC code (scripts/gen_proto.sh); do not edit."""
