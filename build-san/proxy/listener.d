build-san/proxy/listener.o: proxy/listener.c proxy/listener.h \
 proxy/server.h protocol/resp.h proxy/config.h proxy/client.h \
 proxy/upstream.h proxy/log.h
proxy/listener.h:
proxy/server.h:
protocol/resp.h:
proxy/config.h:
proxy/client.h:
proxy/upstream.h:
proxy/log.h:
