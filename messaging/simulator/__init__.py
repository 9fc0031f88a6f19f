"""A local stand-in for the messaging platform (`svcctl sim`): see `messaging.simulator.server`."""
