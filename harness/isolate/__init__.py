"""The isolation, the one part a security reviewer reads end to end: how a process that runs untrusted
code is started and bounded (sandbox: the plan and its limits; jail: entering it, in the child;
isolation: a bounded run and its outcome), and the only ways out of it: messages (channel) and
outputs (handoff), which the lane reads and checks.

May import: core.
"""
