"""remote-leader's composition root and wire package.

``remote_leader.cli`` is the one console command that fronts every package; the generated
protobuf/gRPC code lives in ``remote_leader.v1`` (proto package ``remote_leader.v1``). This
``__init__`` stays empty so that importing the wire never imports the CLI.
"""
