build-san/protocol/commands.o: protocol/commands.c protocol/commands.h
protocol/commands.h:
