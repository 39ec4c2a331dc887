build-san/proxy/client.o: proxy/client.c proxy/client.h protocol/resp.h \
 proxy/server.h proxy/config.h proxy/upstream.h protocol/commands.h \
 proxy/log.h
proxy/client.h:
protocol/resp.h:
proxy/server.h:
proxy/config.h:
proxy/upstream.h:
protocol/commands.h:
proxy/log.h:
