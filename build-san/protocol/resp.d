build-san/protocol/resp.o: protocol/resp.c protocol/resp.h
protocol/resp.h:
