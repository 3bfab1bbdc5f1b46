"""Generated protobuf/gRPC code for proto package remote_leader.v1 (scripts/gen_proto.sh); do not edit.

The wire layer imports nothing of ours: server/ and client/ import it, never the reverse.
"""
