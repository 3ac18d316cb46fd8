"""Code that runs ON the observed host: the specmon host agent, a package of small modules
(protocol, tail, procs, control, nvml, main; shipping and load order in protocol.py).

Nothing in this folder imports specmon (its modules import each other relatively): the client
(specmon/hosts/agent_client.py) sends them over the channel as one bundle, which the host's
Python loads as a package, and they must run with only the standard library (plus pynvml when
the host has it), on Python 3.6+. specmon imports them (the protocol constants, the NVML
collector, /proc readers); they never import specmon.
"""
